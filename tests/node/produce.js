// Produce messages with kafkajs, as a Node application would, and print what the broker answered.
// usage: node produce.js BOOTSTRAP TOPIC CODEC INPUT.json
// INPUT.json: [{key, value, headers: {name: value}, timestamp}] with base64 key/value/header values.
'use strict'
const fs = require('fs')
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')
const { registerCodecs } = require('./codecs')

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD
}

async function main () {
  const [bootstrap, topic, codec, inputPath] = process.argv.slice(2)
  await registerCodecs()
  const input = JSON.parse(fs.readFileSync(inputPath))
  const kafka = new Kafka({ clientId: 'ledgerwire-test', brokers: [bootstrap], logLevel: logLevel.WARN })
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true })
  await admin.disconnect()

  const producer = kafka.producer()
  await producer.connect()
  const baseOffsets = []
  const chunk = 1000
  for (let i = 0; i < input.length; i += chunk) {
    const messages = input.slice(i, i + chunk).map(m => ({
      key: Buffer.from(m.key, 'base64'),
      value: Buffer.from(m.value, 'base64'),
      headers: Object.fromEntries(Object.entries(m.headers).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
      timestamp: String(m.timestamp)
    }))
    const result = await producer.send({ topic, acks: -1, compression: CODECS[codec], messages })
    baseOffsets.push(Number(result[0].baseOffset))
  }
  await producer.disconnect()
  process.stdout.write(JSON.stringify({ baseOffsets }) + '\n')
}

main().catch(err => { console.error(err); process.exit(1) })
