import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Produce-throughput load for benchmarks/bench_idempotence.py: `count` values of `size` bytes
 * to `topic`, round robin over `partitions`, with the client's settings from kafka.* (the
 * benchmark passes idempotence on or off, acks=all, linger.ms, batch.size). A first `warmup`
 * records (not timed) let the JIT and the metadata settle. Emits "done" with msg_per_s and the
 * number of failed sends; a failed send exits non-zero.
 */
public final class KafkaProducePerf {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        String topic = a.str("topic");
        int count = a.integer("count", 100000);
        int warmup = a.integer("warmup", 5000);
        int partitions = a.integer("partitions", 1);
        byte[] value = new byte[a.integer("size", 1024)];
        new Random(1).nextBytes(value);
        AtomicLong failed = new AtomicLong();
        double rate;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < warmup; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, null, value));
            }
            producer.flush();
            long start = System.nanoTime();
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, null, value),
                        (md, e) -> { if (e != null) failed.incrementAndGet(); });
            }
            producer.flush();
            rate = count / ((System.nanoTime() - start) / 1e9);
        }
        Out.emit("done", "msg_per_s", rate, "failed", failed.get());
        if (failed.get() > 0) System.exit(1);
    }
}
