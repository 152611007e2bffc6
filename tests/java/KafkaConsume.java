import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Consumes `count` records from `topics` (comma-separated) and stops, or stops after
 * `timeout_ms` with what it has. With `group` it subscribes (the protocol is
 * kafka.group.protocol: classic, the default, or consumer for KIP-848) and commits
 * synchronously at the end; without, it assigns every partition from the beginning.
 * Emits one "record" per record, then "done" (count, assignment, committed offsets).
 */
public final class KafkaConsume {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        String group = a.str("group", null);
        if (group != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.putIfAbsent(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        }
        List<String> topics = Arrays.asList(a.list("topics").length > 0 ? a.list("topics") : a.list("topic"));
        int count = a.integer("count", 10);
        long deadline = System.currentTimeMillis() + a.longValue("timeout_ms", 60_000);
        int got = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            if (group != null) {
                consumer.subscribe(topics);
            } else {
                List<TopicPartition> parts = new ArrayList<>();
                for (String t : topics) {
                    for (PartitionInfo p : consumer.partitionsFor(t)) parts.add(new TopicPartition(t, p.partition()));
                }
                consumer.assign(parts);
                consumer.seekToBeginning(parts);
            }
            while (got < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    List<Object> headers = new ArrayList<>();
                    for (Header h : r.headers()) headers.add(Arrays.asList(h.key(), h.value()));
                    Out.emit("record", "topic", r.topic(), "partition", r.partition(), "offset", r.offset(),
                            "key", r.key(), "value", r.value(), "headers", headers);
                    got++;
                }
            }
            List<Object> assignment = new ArrayList<>();
            for (TopicPartition tp : consumer.assignment()) assignment.add(tp.topic() + ":" + tp.partition());
            List<Object> committed = new ArrayList<>();
            if (group != null) {
                consumer.commitSync();
                Map<TopicPartition, OffsetAndMetadata> offsets = consumer.committed(consumer.assignment());
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                    if (e.getValue() != null) {
                        committed.add(Out.map("topic", e.getKey().topic(), "partition", e.getKey().partition(),
                                "offset", e.getValue().offset()));
                    }
                }
            }
            Out.emit("done", "count", got, "assignment", assignment, "committed", committed);
        }
    }
}
