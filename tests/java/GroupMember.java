import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One consumer-group member that runs until SIGTERM, for the group acceptance tests: the same
 * JSON lines as tests/support/group_worker.py ("assignment" with partitions and cause
 * assign/revoke/lost, "records" after their synchronous commit succeeded, "commit_failed",
 * "closed"). Arguments: bootstrap, topic, group, and kafka.* client properties (the protocol
 * is kafka.group.protocol). It only reports; the test decides.
 */
public final class GroupMember {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.putIfAbsent(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.GROUP_ID_CONFIG, a.str("group"));
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        TreeSet<Integer> owned = new TreeSet<>();
        Thread main = Thread.currentThread();
        final boolean[] stopping = {false};
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping[0] = true;
            consumer.wakeup();
            try {
                main.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        consumer.subscribe(Arrays.asList(a.str("topic")), new ConsumerRebalanceListener() {
            private void report(Collection<TopicPartition> parts, String cause, boolean add) {
                List<Object> delta = new ArrayList<>();
                for (TopicPartition tp : parts) {
                    delta.add(tp.partition());
                    if (add) owned.add(tp.partition()); else owned.remove(tp.partition());
                }
                Out.emit("assignment", "partitions", new ArrayList<Object>(owned), "cause", cause,
                        "delta", delta);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                if (!parts.isEmpty()) report(parts, "assign", true);
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                if (!parts.isEmpty()) report(parts, "revoke", false);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                if (!parts.isEmpty()) report(parts, "lost", false);
            }
        });
        try {
            while (!stopping[0]) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                List<Object> values = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : records) values.add(r.value());
                try {
                    consumer.commitSync();
                    Out.emit("records", "values", values);
                } catch (WakeupException e) {
                    throw e;
                } catch (KafkaException e) {
                    Out.emit("commit_failed", "error", e.getClass().getSimpleName() + ": " + e.getMessage());
                }
            }
        } catch (WakeupException e) {
            // stopping
        } finally {
            consumer.close();
            Out.emit("closed");
        }
    }
}
