import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

/** name=value program arguments; kafka.* ones are client properties (see java_clients.py). */
public final class Args {
    private final Map<String, String> values = new LinkedHashMap<>();

    public Args(String[] argv) {
        for (String arg : argv) {
            int eq = arg.indexOf('=');
            if (eq < 0) throw new IllegalArgumentException("argument without '=': " + arg);
            values.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
    }

    public String str(String name) {
        String v = values.get(name);
        if (v == null) throw new IllegalArgumentException("missing argument " + name);
        return v;
    }

    public String str(String name, String fallback) {
        return values.getOrDefault(name, fallback);
    }

    public int integer(String name, int fallback) {
        String v = values.get(name);
        return v == null ? fallback : Integer.parseInt(v);
    }

    public long longValue(String name, long fallback) {
        String v = values.get(name);
        return v == null ? fallback : Long.parseLong(v);
    }

    public boolean flag(String name, boolean fallback) {
        String v = values.get(name);
        return v == null ? fallback : Boolean.parseBoolean(v);
    }

    public String[] list(String name) {
        String v = values.get(name);
        return v == null || v.isEmpty() ? new String[0] : v.split(",");
    }

    /** Client properties: bootstrap.servers from `bootstrap`, then every kafka.KEY=VALUE. */
    public Properties kafkaProps() {
        Properties props = new Properties();
        if (values.containsKey("bootstrap")) props.put("bootstrap.servers", values.get("bootstrap"));
        for (Map.Entry<String, String> e : values.entrySet()) {
            if (e.getKey().startsWith("kafka.")) props.put(e.getKey().substring(6), e.getValue());
        }
        return props;
    }
}
