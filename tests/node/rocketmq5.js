// RocketMQ 5's Node.js client (npm rocketmq-client-nodejs) against ledgerwire's gRPC endpoint.
//   node rocketmq5.js ENDPOINT TOPIC GROUP COUNT
// Sends COUNT messages, then receives and acknowledges them with a SimpleConsumer; prints one
// JSON line per event.
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [endpoint, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const producer = new Producer({ endpoints: endpoint });
  await producer.startup();
  for (let i = 0; i < count; i++) {
    const receipt = await producer.send({
      topic, tag: 'node', keys: [`nk-${i}`], body: Buffer.from(`node-${i}`),
      properties: new Map().set('index', String(i)),
    });
    console.log(JSON.stringify({ sent: i, messageId: receipt.messageId }));
  }
  await producer.shutdown();
  const consumer = new SimpleConsumer({
    consumerGroup: group, endpoints: endpoint,
    subscriptions: new Map().set(topic, '*'), awaitDuration: 3000,
  });
  await consumer.startup();
  let got = 0;
  const deadline = Date.now() + 30000;
  while (got < count && Date.now() < deadline) {
    for (const m of await consumer.receive(16, 15000)) {
      got++;
      console.log(JSON.stringify({ body: m.body.toString(), attempt: m.deliveryAttempt,
                                   tag: m.tag, messageId: m.messageId }));
      await consumer.ack(m);
    }
  }
  await consumer.shutdown();
  console.log(JSON.stringify({ done: got }));
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
