import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;

/**
 * Runs Kafka's own kafka-metadata-quorum (org.apache.kafka.tools.MetadataQuorumCommand) many
 * times in one JVM, so the mixed-quorum suite can ask every node after every fault without
 * paying a JVM start each time. Reads one invocation per line on stdin (arguments separated by
 * tabs) and answers each with its output followed by a line "=== rc=N".
 *
 * The tool's entry point that returns instead of exiting (mainNoExit) is package-private in
 * every 4.x release, hence the reflection; what runs is the tool's code, unchanged.
 */
public class QuorumTool {
    public static void main(String[] args) throws Exception {
        Class<?> tool = Class.forName("org.apache.kafka.tools.MetadataQuorumCommand");
        Method run = tool.getDeclaredMethod("mainNoExit", String[].class);
        run.setAccessible(true);
        PrintStream out = System.out;
        PrintStream err = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(captured, true, StandardCharsets.UTF_8);
            System.setOut(capture);
            System.setErr(capture);
            int rc;
            try {
                rc = (Integer) run.invoke(null, (Object) line.split("\t"));
            } catch (Throwable t) {
                t.printStackTrace(capture);
                rc = 99;
            } finally {
                System.setOut(out);
                System.setErr(err);
            }
            out.print(captured.toString(StandardCharsets.UTF_8));
            out.println("=== rc=" + rc);
            out.flush();
        }
    }
}
