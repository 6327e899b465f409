import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.common.errors.UnsupportedVersionException;

/**
 * Kafka's Java Admin client in controller mode (bootstrap.controllers) against ringraft.
 *
 * The admin client opens a connection, sends ApiVersions v4 and parses the answer before it
 * sends anything else. ringraft does not serve DescribeCluster yet, so a client that parsed
 * the answer fails the call locally with "The node does not support DESCRIBE_CLUSTER". Any
 * other outcome (a timeout, a disconnect, a parse error) means the handshake did not complete.
 * Exit 0 on the expected outcome, 1 otherwise.
 */
public class AdminHandshake {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_CONTROLLERS_CONFIG, args[0]);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "8000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "6000");
        try (Admin admin = Admin.create(props)) {
            admin.describeCluster(new DescribeClusterOptions().timeoutMs(6000))
                .nodes().get(10, TimeUnit.SECONDS);
            System.out.println("UNEXPECTED: describeCluster succeeded on a node that does not serve it");
            System.exit(1);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            String message = String.valueOf(cause.getMessage());
            if (cause instanceof UnsupportedVersionException && message.contains("DESCRIBE_CLUSTER")) {
                System.out.println("OK: ApiVersions handshake completed; client says: " + message);
                System.exit(0);
            }
            System.out.println("UNEXPECTED: " + cause.getClass().getName() + ": " + message);
            System.exit(1);
        }
    }
}
