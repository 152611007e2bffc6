// One kafkajs consumer-group member, speaking the JSON-lines protocol of
// tests/support/group_worker.py: assignment / records (after their commit) / commit_failed / closed.
// usage: node group_worker.js BOOTSTRAP TOPIC GROUP SESSION_TIMEOUT_MS HEARTBEAT_INTERVAL_MS
// SIGTERM disconnects (the member leaves the group); tests SIGKILL it to simulate a crash.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

function emit (event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

async function main () {
  const [bootstrap, topic, groupId, sessionText, heartbeatText] = process.argv.slice(2)
  const kafka = new Kafka({ clientId: 'ledgerwire-group-test', brokers: [bootstrap], logLevel: logLevel.NOTHING })
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: Number(sessionText),
    heartbeatInterval: Number(heartbeatText),
    rebalanceTimeout: 10000
  })
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const partitions = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
    emit('assignment', { partitions, cause: 'assign', delta: partitions })
  })
  let stopping = false
  process.on('SIGTERM', async () => {
    if (stopping) return
    stopping = true
    await consumer.disconnect()
    emit('closed', {})
    process.exit(0)
  })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch, isStale }) => {
      if (batch.messages.length === 0 || isStale() || stopping) return
      const last = batch.messages[batch.messages.length - 1]
      try {
        await consumer.commitOffsets([{ topic, partition: batch.partition, offset: String(Number(last.offset) + 1) }])
        emit('records', { values: batch.messages.map(m => m.value.toString()) })
      } catch (err) {
        emit('commit_failed', { error: String(err) })
      }
    }
  })
}

main().catch(err => { console.error(err); process.exit(1) })
