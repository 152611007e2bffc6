import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;

/** KafkaAdmin's transaction, log-dir, leader-election and SCRAM ops; false when `op` is not one. */
final class KafkaAdminOps {
    private KafkaAdminOps() {}

    static boolean run(Admin admin, Args a) throws Exception {
        switch (a.str("op")) {
            case "list_transactions": {
                ListTransactionsOptions options = new ListTransactionsOptions();
                Set<TransactionState> states = new HashSet<>();
                for (String s : a.list("states")) states.add(TransactionState.parse(s));
                if (!states.isEmpty()) options.filterStates(states);
                Set<Long> pids = new HashSet<>();
                for (String p : a.list("producer_ids")) pids.add(Long.parseLong(p));
                if (!pids.isEmpty()) options.filterProducerIds(pids);
                long duration = a.longValue("duration_ms", -1);
                if (duration >= 0) options.filterOnDuration(duration);
                try {
                    List<Object> found = new ArrayList<>();
                    for (TransactionListing t : admin.listTransactions(options).all().get()) {
                        found.add(Out.map("transactional_id", t.transactionalId(), "producer_id", t.producerId(),
                                "state", t.state().toString()));
                    }
                    Out.emit("transactions", "listings", found);
                } catch (Exception ex) {
                    Out.error(ex);
                }
                return true;
            }
            case "describe_transactions": {
                org.apache.kafka.clients.admin.DescribeTransactionsResult described =
                        admin.describeTransactions(Arrays.asList(a.list("ids")));
                for (String id : a.list("ids")) {
                    try {
                        TransactionDescription d = described.description(id).get();
                        List<Object> parts = new ArrayList<>();
                        for (TopicPartition tp : d.topicPartitions()) parts.add(tp.topic() + ":" + tp.partition());
                        parts.sort(null);
                        Out.emit("transaction", "transactional_id", id, "coordinator", d.coordinatorId(),
                                "state", d.state().toString(), "producer_id", d.producerId(),
                                "producer_epoch", d.producerEpoch(), "timeout_ms", d.transactionTimeoutMs(),
                                "start_ms", d.transactionStartTimeMs().isPresent()
                                        ? d.transactionStartTimeMs().getAsLong() : null,
                                "partitions", parts);
                    } catch (Exception ex) {
                        Out.error(ex, "transactional_id", id);
                    }
                }
                return true;
            }
            case "describe_log_dirs": {
                List<Integer> brokers = new ArrayList<>();
                for (String b : a.list("brokers")) brokers.add(Integer.parseInt(b));
                try {
                    for (Map.Entry<Integer, Map<String, LogDirDescription>> b :
                            admin.describeLogDirs(brokers).allDescriptions().get().entrySet()) {
                        for (Map.Entry<String, LogDirDescription> d : b.getValue().entrySet()) {
                            List<Object> replicas = new ArrayList<>();
                            for (Map.Entry<TopicPartition, ReplicaInfo> r : d.getValue().replicaInfos().entrySet()) {
                                replicas.add(Out.map("topic", r.getKey().topic(), "partition", r.getKey().partition(),
                                        "size", r.getValue().size(), "offset_lag", r.getValue().offsetLag(),
                                        "future", r.getValue().isFuture()));
                            }
                            LogDirDescription dd = d.getValue();
                            Out.emit("log_dir", "broker", b.getKey(), "path", d.getKey(),
                                    "error", dd.error() == null ? null : dd.error().getClass().getSimpleName(),
                                    "total_bytes", dd.totalBytes().isPresent() ? dd.totalBytes().getAsLong() : null,
                                    "usable_bytes", dd.usableBytes().isPresent() ? dd.usableBytes().getAsLong() : null,
                                    "replicas", replicas);
                        }
                    }
                } catch (Exception ex) {
                    Out.error(ex);
                }
                return true;
            }
            case "elect_leaders": {
                Set<TopicPartition> partitions = null;
                if (a.list("partitions").length > 0) {
                    partitions = new HashSet<>();
                    for (String tp : a.list("partitions")) {
                        int colon = tp.lastIndexOf(':');
                        partitions.add(new TopicPartition(tp.substring(0, colon), Integer.parseInt(tp.substring(colon + 1))));
                    }
                }
                try {
                    Map<TopicPartition, Optional<Throwable>> result = admin.electLeaders(
                            ElectionType.valueOf(a.str("type", "PREFERRED")), partitions).partitions().get();
                    for (Map.Entry<TopicPartition, Optional<Throwable>> e : result.entrySet()) {
                        Out.emit("election", "topic", e.getKey().topic(), "partition", e.getKey().partition(),
                                "error", e.getValue().map(t -> t.getClass().getSimpleName()).orElse(null));
                    }
                    Out.emit("elected", "count", result.size());
                } catch (Exception ex) {
                    Out.error(ex);
                }
                return true;
            }
            case "describe_scram": {
                // every user (users=null), or each named user's own description (its error)
                try {
                    if (a.list("users").length == 0) {
                        Map<String, UserScramCredentialsDescription> all =
                                admin.describeUserScramCredentials().all().get();
                        for (UserScramCredentialsDescription d : all.values()) scramUser(d);
                        Out.emit("described", "count", all.size());
                    } else {
                        org.apache.kafka.clients.admin.DescribeUserScramCredentialsResult r =
                                admin.describeUserScramCredentials(Arrays.asList(a.list("users")));
                        for (String user : a.list("users")) {
                            try {
                                scramUser(r.description(user).get());
                            } catch (Exception ex) {
                                Out.error(ex, "user", user);
                            }
                        }
                    }
                } catch (Exception ex) {
                    Out.error(ex);
                }
                return true;
            }
            case "alter_scram": {
                // upsert=user:SCRAM-SHA-256:iterations:password,...  delete=user:SCRAM-SHA-512,...
                List<UserScramCredentialAlteration> changes = new ArrayList<>();
                for (String u : a.list("upsert")) {
                    String[] f = u.split(":", 4);
                    changes.add(new UserScramCredentialUpsertion(f[0], new ScramCredentialInfo(
                            ScramMechanism.fromMechanismName(f[1]), Integer.parseInt(f[2])), f[3]));
                }
                for (String d : a.list("delete")) {
                    String[] f = d.split(":", 2);
                    changes.add(new UserScramCredentialDeletion(f[0], ScramMechanism.fromMechanismName(f[1])));
                }
                for (Map.Entry<String, KafkaFuture<Void>> e :
                        admin.alterUserScramCredentials(changes).values().entrySet()) {
                    try {
                        e.getValue().get();
                        Out.emit("altered", "user", e.getKey());
                    } catch (Exception ex) {
                        Out.error(ex, "user", e.getKey());
                    }
                }
                return true;
            }
            default:
                return false;
        }
    }

    private static void scramUser(UserScramCredentialsDescription d) {
        List<Object> infos = new ArrayList<>();
        for (ScramCredentialInfo i : d.credentialInfos()) {
            infos.add(Out.map("mechanism", i.mechanism().mechanismName(), "iterations", i.iterations()));
        }
        Out.emit("scram_user", "user", d.name(), "credentials", infos);
    }
}
