import java.util.Collection;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.common.Node;

/**
 * Kafka's Java Admin client in controller mode (bootstrap.controllers) against ringraft.
 *
 * The admin client opens a connection, sends ApiVersions and parses the answer, then refreshes
 * its metadata with DescribeCluster (EndpointType CONTROLLER). ringraft must answer with the
 * cluster id, its voters as the node list and the raft leader as the controller; a controller
 * missing from the list would leave the client unable to route admin calls.
 *
 * Args: bootstrap host:port, the cluster id and the node id expected as controller.
 * Exit 0 when the answer matches, 1 otherwise.
 */
public class AdminHandshake {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_CONTROLLERS_CONFIG, args[0]);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "8000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "6000");
        try (Admin admin = Admin.create(props)) {
            DescribeClusterResult result =
                admin.describeCluster(new DescribeClusterOptions().timeoutMs(6000));
            String clusterId = result.clusterId().get(10, TimeUnit.SECONDS);
            Node controller = result.controller().get(10, TimeUnit.SECONDS);
            Collection<Node> nodes = result.nodes().get(10, TimeUnit.SECONDS);
            String seen = "cluster " + clusterId + ", controller " + controller + ", nodes " + nodes;
            boolean ok = clusterId.equals(args[1])
                && controller != null
                && String.valueOf(controller.id()).equals(args[2])
                && nodes.contains(controller);
            System.out.println((ok ? "OK: " : "UNEXPECTED: ") + seen);
            System.exit(ok ? 0 : 1);
        }
    }
}
