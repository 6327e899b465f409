import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.common.Node;

/**
 * Runs Kafka's own kafka-metadata-quorum (org.apache.kafka.tools.MetadataQuorumCommand) many
 * times in one JVM, so the mixed-quorum suite can ask every node after every fault without
 * paying a JVM start each time. Reads one invocation per line on stdin (arguments separated by
 * tabs) and answers each with its output followed by a line "=== rc=N".
 *
 * A line "describe-cluster HOST:PORT [CONFIG]" instead asks that controller for DescribeCluster
 * through Kafka's Admin client (bootstrap.controllers; the client properties in the file CONFIG,
 * such as security.protocol=SSL and its ssl.* keys, if given): "controller N" and one "node N"
 * per registered controller, which is what the tool and Kafka's brokers are told.
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
                String[] words = line.split("\t");
                if (words[0].equals("describe-cluster")) {
                    rc = describeCluster(words[1], words.length > 2 ? words[2] : null);
                } else {
                    rc = (Integer) run.invoke(null, (Object) words);
                }
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

    static int describeCluster(String controller, String config) throws Exception {
        Properties props = new Properties();
        if (config != null) {
            try (FileInputStream in = new FileInputStream(config)) {
                props.load(in);
            }
        }
        props.put("bootstrap.controllers", controller);
        props.put("default.api.timeout.ms", "3000");
        props.put("request.timeout.ms", "2000");
        try (Admin admin = Admin.create(props)) {
            DescribeClusterResult r = admin.describeCluster();
            Node active = r.controller().get(5, TimeUnit.SECONDS);
            System.out.println("controller " + (active == null ? -1 : active.id()));
            for (Node n : r.nodes().get(5, TimeUnit.SECONDS)) {
                System.out.println("node " + n.id());
            }
        }
        return 0;
    }
}
