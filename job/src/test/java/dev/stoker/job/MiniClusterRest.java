package dev.stoker.job;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import org.apache.flink.runtime.minicluster.MiniCluster;

/** Test helper: GETs of a MiniCluster's REST API (the web UI's), as JSON. */
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
}
