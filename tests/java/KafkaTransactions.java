import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A transactional producer (`transactional_id`): `committed` records in one committed
 * transaction, then `aborted` records in an aborted one (none when the count is 0), then (with `open` > 0) that many
 * records in a transaction left open while the program sleeps `hold_ms` (so admin tools can see
 * an ongoing transaction), then aborts it. Values are "committed-N", "aborted-N", "open-N".
 * Emits "committed", "aborted", "open" (when used) and "done".
 */
public final class KafkaTransactions {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, a.str("transactional_id"));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        String topic = a.str("topic");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            int committed = a.integer("committed", 5);
            if (committed > 0) {
                sendAll(producer, topic, "committed", committed);
                producer.commitTransaction();
                Out.emit("committed", "count", committed);
            }
            int aborted = a.integer("aborted", 5);
            if (aborted > 0) {
                sendAll(producer, topic, "aborted", aborted);
                producer.abortTransaction();
                Out.emit("aborted", "count", aborted);
            }
            int open = a.integer("open", 0);
            if (open > 0) {
                sendAll(producer, topic, "open", open);
                producer.flush();
                Out.emit("open", "count", open);
                Thread.sleep(a.longValue("hold_ms", 5000));
                producer.abortTransaction();
            }
        }
        Out.emit("done");
    }

    private static void sendAll(KafkaProducer<byte[], byte[]> producer, String topic, String kind, int n)
            throws Exception {
        producer.beginTransaction();
        for (int i = 0; i < n; i++) {
            producer.send(new ProducerRecord<>(topic, ("k" + i).getBytes(StandardCharsets.UTF_8),
                    (kind + "-" + i).getBytes(StandardCharsets.UTF_8))).get();
        }
    }
}
