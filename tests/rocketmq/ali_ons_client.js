// ali-ons 3.12 against ledgerwire: produce messages with tags and keys, then push-consume
// with a tag subscription; prints one JSON line with what was sent and received.
// usage: node ali_ons_client.js NAMESRV TOPIC GROUP
'use strict'
const { Producer, Consumer, Message } = require('ali-ons')

const silent = { info () {}, warn () {}, debug () {}, error (...args) { console.error(...args) } }

async function main () {
  const [nameSrv, topic, group] = process.argv.slice(2)
  // httpclient is only used to look name servers up over HTTP (onsAddr); nameSrv is given
  const common = { nameSrv, httpclient: {}, accessKeyId: 'ak', accessKeySecret: 'sk', logger: silent }
  // sendMsgTimeout: its 3 s default (all retries within 4 s) is tight on a loaded machine
  const producer = new Producer({ ...common, producerGroup: 'PG_' + group, sendMsgTimeout: 15000 })
  await producer.ready()
  const sent = []
  const tags = ['TagA', 'TagB', 'TagA', 'TagC', 'TagA']
  for (let i = 0; i < tags.length; i++) {
    const msg = new Message(topic, tags[i], 'ons-' + i)
    msg.keys = ['key-' + i]
    const result = await producer.send(msg)
    sent.push({ status: result.sendStatus, tag: tags[i], queueOffset: result.queueOffset })
  }
  await producer.close()

  const consumer = new Consumer({ ...common, consumerGroup: group, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' })
  const received = []
  const expected = tags.filter(t => t === 'TagA').length
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out, got ' + JSON.stringify(received))), 30000)
    consumer.subscribe(topic, 'TagA', async msg => {
      received.push({ tag: msg.tags, body: msg.body.toString(), keys: msg.keys, queueOffset: msg.queueOffset })
      if (received.length >= expected) { clearTimeout(timer); setTimeout(resolve, 1000) }
    })
  })
  consumer.on('error', err => console.error('consumer error', err))
  await done
  await consumer.close()
  console.log(JSON.stringify({ sent, received }))
  process.exit(0)
}

main().catch(err => { console.error(err); process.exit(1) })
