// Consume a topic with a kafkajs consumer group and print every message as one JSON line.
// usage: node consume.js BOOTSTRAP TOPIC GROUP COUNT
'use strict'
const { Kafka, logLevel } = require('kafkajs')
const { registerCodecs } = require('./codecs')

async function main () {
  const [bootstrap, topic, groupId, countText] = process.argv.slice(2)
  const count = Number(countText)
  await registerCodecs()
  const kafka = new Kafka({ clientId: 'ledgerwire-test', brokers: [bootstrap], logLevel: logLevel.WARN })
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, rebalanceTimeout: 10000 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let seen = 0
  const lines = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${seen} of ${count} messages`)), 120000)
    consumer.run({
      eachBatch: async ({ batch }) => {
        for (const m of batch.messages) {
          lines.push(JSON.stringify({
            offset: Number(m.offset),
            key: m.key ? m.key.toString('base64') : null,
            value: m.value ? m.value.toString('base64') : null,
            headers: Object.fromEntries(Object.entries(m.headers || {}).map(([k, v]) => [k, v.toString('base64')])),
            timestamp: Number(m.timestamp)
          }))
          seen += 1
        }
        if (seen >= count) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  process.stdout.write(lines.join('\n') + '\n')
}

main().catch(err => { console.error(err); process.exit(1) })
