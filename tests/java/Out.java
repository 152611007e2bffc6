import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;

/** Results as one JSON object per stdout line (see java_clients.py). */
public final class Out {
    private Out() {}

    public static synchronized void emit(String event, Object... keyValues) {
        Map<String, Object> record = new LinkedHashMap<>();
        record.put("event", event);
        for (int i = 0; i + 1 < keyValues.length; i += 2) record.put((String) keyValues[i], keyValues[i + 1]);
        StringBuilder sb = new StringBuilder();
        write(sb, record);
        System.out.println(sb);
        System.out.flush();
    }

    /** An expected client error as a result: its simple class name, message and cause. */
    public static void error(Throwable e, Object... keyValues) {
        Throwable root = e;
        while ((root instanceof java.util.concurrent.ExecutionException
                || root instanceof java.util.concurrent.CompletionException) && root.getCause() != null) {
            root = root.getCause();
        }
        Object[] all = new Object[keyValues.length + 4];
        all[0] = "error";
        all[1] = root.getClass().getSimpleName();
        all[2] = "message";
        all[3] = String.valueOf(root.getMessage());
        System.arraycopy(keyValues, 0, all, 4, keyValues.length);
        emit("error", all);
    }

    public static Map<String, Object> map(Object... keyValues) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i + 1 < keyValues.length; i += 2) m.put((String) keyValues[i], keyValues[i + 1]);
        return m;
    }

    private static void write(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Boolean || v instanceof Integer || v instanceof Long || v instanceof Short) {
            sb.append(v);
        } else if (v instanceof Number) {
            double d = ((Number) v).doubleValue();
            if (Double.isFinite(d)) sb.append(v); else sb.append("null");
        } else if (v instanceof byte[]) {
            string(sb, new String((byte[]) v, StandardCharsets.UTF_8));
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                string(sb, String.valueOf(e.getKey()));
                sb.append(':');
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) v) {
                if (!first) sb.append(',');
                first = false;
                write(sb, item);
            }
            sb.append(']');
        } else if (v instanceof Object[]) {
            write(sb, java.util.Arrays.asList((Object[]) v));
        } else {
            string(sb, v.toString());
        }
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c)); else sb.append(c);
            }
        }
        sb.append('"');
    }
}
