import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The chaos benchmark's Java producer (benchmarks/chaos.py): sends keyed records to `topic` at
 * `rate` per second with the producer's defaults (idempotent, acks=all) until its stdin is
 * closed, then flushes. Values are `run`-N (unique), keys N. Emits "config", one "ack"
 * (value, partition) or "failed" (value, error class) per record as its callback runs, and
 * "done". It never retries on its own: what the client library does is what is measured.
 */
public final class ChaosProduce {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        ProducerConfig effective = new ProducerConfig(props);
        Out.emit("config", "enable.idempotence", effective.getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG),
                "acks", effective.getString(ProducerConfig.ACKS_CONFIG));
        String topic = a.str("topic");
        String run = a.str("run", "j");
        double rate = Double.parseDouble(a.str("rate", "100"));
        long intervalNanos = (long) (1_000_000_000L / rate);
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread watcher = new Thread(() -> {
            try {
                InputStream in = System.in;
                while (in.read() >= 0) {
                    // anything before EOF is ignored
                }
            } catch (Exception e) {
                // a broken stdin stops the run as EOF does
            }
            stop.set(true);
        });
        watcher.setDaemon(true);
        watcher.start();
        long sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            long next = System.nanoTime();
            while (!stop.get()) {
                String value = run + "-" + sent;
                byte[] key = Long.toString(sent).getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(topic, key, value.getBytes(StandardCharsets.UTF_8)),
                        (md, e) -> {
                            if (e == null) {
                                Out.emit("ack", "value", value, "partition", md.partition());
                            } else {
                                Out.emit("failed", "value", value, "error", e.getClass().getSimpleName());
                            }
                        });
                sent++;
                next += intervalNanos;
                long wait = next - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
                }
            }
            producer.flush();
        }
        Out.emit("done", "sent", sent);
    }
}
