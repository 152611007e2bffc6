import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;

/**
 * One JVM serving many calls of a program (java_clients.JavaServer): each stdin line is one
 * call's name=value arguments separated by tabs; its events are followed by
 * {"event": "served"}, or {"event": "served", "failed": stack trace} when the call threw (the
 * caller raises it, as a one-shot run's non-zero exit would). Ends at the end of stdin.
 */
public final class Serve {
    public interface Call {
        void run(Args a) throws Exception;
    }

    private Serve() {
    }

    public static void lines(Call call) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            try {
                call.run(new Args(line.isEmpty() ? new String[0] : line.split("\t")));
                Out.emit("served");
            } catch (Exception e) {
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                Out.emit("served", "failed", trace.toString());
            }
        }
    }
}
