package dev.stoker.job;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import org.apache.flink.api.common.JobID;
import org.apache.flink.runtime.minicluster.MiniCluster;

/** Test helper: GETs and PUTs of a MiniCluster's REST API (the web UI's), as JSON. */
final class MiniClusterRest {
    private static final ObjectMapper JSON = new ObjectMapper();

    private MiniClusterRest() {}

    /** GET {@code path} (e.g. {@code /jobs/<id>/checkpoints}) and parse the answer. */
    static JsonNode get(MiniCluster cluster, String path) throws Exception {
        URI base = cluster.getRestAddress().get();
        HttpResponse<String> response =
                HttpClient.newHttpClient()
                        .send(
                                HttpRequest.newBuilder(base.resolve(path)).build(),
                                HttpResponse.BodyHandlers.ofString());
        return JSON.readTree(response.body());
    }

    /**
     * PUT {@code body} to {@code path}, as the web UI does (e.g. a job's resource requirements).
     *
     * @throws AssertionError if the answer is not 2xx
     */
    static void put(MiniCluster cluster, String path, JsonNode body) throws Exception {
        URI base = cluster.getRestAddress().get();
        HttpResponse<String> response =
                HttpClient.newHttpClient()
                        .send(
                                HttpRequest.newBuilder(base.resolve(path))
                                        .header("Content-Type", "application/json")
                                        .PUT(HttpRequest.BodyPublishers.ofString(body.toString()))
                                        .build(),
                                HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() / 100 != 2) {
            throw new AssertionError(
                    "PUT " + path + ": HTTP " + response.statusCode() + " " + response.body());
        }
    }

    /**
     * Waits until every subtask of {@code job} is RUNNING (or already FINISHED), as a checkpoint or
     * savepoint needs: one triggered while a subtask still initialises (a restore at a new
     * parallelism on a loaded machine takes seconds) fails with "Not all required tasks are
     * currently running".
     *
     * @throws AssertionError when that does not happen within {@code timeout}
     */
    static void awaitAllTasksRunning(MiniCluster cluster, JobID job, Duration timeout)
            throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            JsonNode vertices = get(cluster, "/jobs/" + job).path("vertices");
            boolean all = vertices.size() > 0;
            for (JsonNode vertex : vertices) {
                JsonNode tasks = vertex.path("tasks");
                int started = tasks.path("RUNNING").asInt() + tasks.path("FINISHED").asInt();
                all &= started == vertex.path("parallelism").asInt();
            }
            if (all) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError(
                        "not every subtask of job "
                                + job
                                + " is running after "
                                + timeout
                                + ": "
                                + vertices);
            }
            Thread.sleep(50);
        }
    }
}
