import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Produces `count` records to `topic` with the Java producer's defaults (idempotent, acks=all)
 * unless kafka.* overrides say otherwise. Keys are `key_prefix`N, values `value_prefix`N.
 * Emits "config" (effective idempotence and acks), one "sent" per record and "done".
 */
public final class KafkaProduce {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        ProducerConfig effective = new ProducerConfig(props);
        Out.emit("config", "enable.idempotence", effective.getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG),
                "acks", effective.getString(ProducerConfig.ACKS_CONFIG),
                "compression.type", effective.getString(ProducerConfig.COMPRESSION_TYPE_CONFIG));
        String topic = a.str("topic");
        int count = a.integer("count", 10);
        int partition = a.integer("partition", -1);
        String keyPrefix = a.str("key_prefix", "k");
        String valuePrefix = a.str("value_prefix", "v");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> sends = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                byte[] key = (keyPrefix + i).getBytes(StandardCharsets.UTF_8);
                byte[] value = (valuePrefix + i).getBytes(StandardCharsets.UTF_8);
                sends.add(producer.send(partition < 0 ? new ProducerRecord<>(topic, key, value)
                        : new ProducerRecord<>(topic, partition, key, value)));
            }
            for (Future<RecordMetadata> f : sends) {
                RecordMetadata md = f.get();
                Out.emit("sent", "partition", md.partition(), "offset", md.offset());
            }
            producer.flush();
        }
        Out.emit("done", "count", count);
    }
}
