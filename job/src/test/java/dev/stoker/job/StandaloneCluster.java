package dev.stoker.job;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Test helper: a real standalone Flink session cluster (a JobManager and TaskManager JVMs) driven
 * through {@code scripts/cluster.sh}, in its own run directory and on free ports, plus GETs of its
 * REST API. {@link #close()} stops every process of the cluster; a JVM shutdown hook does the same
 * if the test JVM exits first.
 */
final class StandaloneCluster implements AutoCloseable {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Pattern JOB_ID = Pattern.compile("JobID ([0-9a-f]{32})");
    private static final Path SCRIPT =
            Path.of("").toAbsolutePath().getParent().resolve("scripts/cluster.sh");

    private final Path runDir;
    private final int restPort;
    private final int rpcPort;
    private final HttpClient http = HttpClient.newHttpClient();
    private final Thread shutdownHook = new Thread(this::stopQuietly, "stop-standalone-cluster");

    /**
     * Starts a JobManager only (TaskManagers come with {@link #addTaskManager}), with the cluster's
     * configuration (flink-conf/config.yaml and the script's single-machine overrides) plus {@code
     * options}.
     */
    StandaloneCluster(Path runDir, Map<String, String> options) throws IOException {
        this.runDir = runDir;
        this.restPort = freePort();
        this.rpcPort = freePort();
        Runtime.getRuntime().addShutdownHook(shutdownHook);
        List<String> args = new ArrayList<>(List.of("start"));
        args.addAll(dynamicProperties(options));
        try {
            script(Duration.ofMinutes(3), args);
        } catch (IOException | RuntimeException e) {
            close();
            throw e;
        }
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private static List<String> dynamicProperties(Map<String, String> options) {
        List<String> out = new ArrayList<>();
        options.forEach(
                (k, v) -> {
                    out.add("-D");
                    out.add(k + "=" + v);
                });
        return out;
    }

    /** Runs {@code scripts/cluster.sh args}; returns its stdout, fails with its output. */
    private String script(Duration timeout, List<String> args) throws IOException {
        List<String> command = new ArrayList<>(List.of(SCRIPT.toString()));
        command.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(false);
        Map<String, String> env = pb.environment();
        env.put("STOKER_CLUSTER_DIR", runDir.toString());
        env.put("STOKER_REST_PORT", Integer.toString(restPort));
        env.put("STOKER_JM_RPC_PORT", Integer.toString(rpcPort));
        env.put("STOKER_TASKMANAGERS", "0");
        Path err = Files.createTempFile(runDir.getParent(), "cluster-sh", ".err");
        pb.redirectError(err.toFile());
        Process p = pb.start();
        String out;
        try {
            out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(timeout.toSeconds(), TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new IllegalStateException("scripts/cluster.sh " + args + " timed out");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            p.destroyForcibly();
            throw new IllegalStateException(e);
        }
        String stderr = Files.readString(err);
        Files.delete(err);
        if (p.exitValue() != 0) {
            throw new IllegalStateException(
                    "scripts/cluster.sh "
                            + args
                            + " failed ("
                            + p.exitValue()
                            + "):\n"
                            + out
                            + "\n"
                            + stderr);
        }
        return out;
    }

    /** Starts one more TaskManager with {@code options} in its own config dir; its index. */
    int addTaskManager(Map<String, String> options) throws IOException {
        List<String> args = new ArrayList<>(List.of("add-taskmanager"));
        args.addAll(dynamicProperties(options));
        return Integer.parseInt(script(Duration.ofMinutes(3), args).trim());
    }

    /** SIGKILLs TaskManager {@code index}. */
    void killTaskManager(int index) throws IOException {
        script(Duration.ofSeconds(30), List.of("kill-taskmanager", Integer.toString(index)));
    }

    /** {@code flink run -d -c mainClass jar args}; the job id. */
    String submit(Path jar, String mainClass, String... args) throws IOException {
        List<String> command =
                new ArrayList<>(List.of("flink", "run", "-d", "-c", mainClass, jar.toString()));
        command.addAll(List.of(args));
        String out = script(Duration.ofMinutes(2), command);
        Matcher m = JOB_ID.matcher(out);
        if (!m.find()) {
            throw new IllegalStateException("no job id in the output of flink run:\n" + out);
        }
        return m.group(1);
    }

    /** GET {@code path} of the REST API as JSON. */
    JsonNode get(String path) throws IOException, InterruptedException {
        HttpResponse<String> response =
                http.send(
                        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + restPort + path))
                                .timeout(Duration.ofSeconds(10))
                                .build(),
                        HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IOException("GET " + path + ": HTTP " + response.statusCode());
        }
        return JSON.readTree(response.body());
    }

    /** The JobManager's log so far (for a failure message). */
    String jobManagerLog() throws IOException {
        return Files.readString(runDir.resolve("log/jobmanager.log"));
    }

    private void stopQuietly() {
        try {
            script(Duration.ofMinutes(2), List.of("stop"));
        } catch (IOException | RuntimeException e) {
            System.err.println("stopping the cluster in " + runDir + " failed: " + e);
        }
    }

    @Override
    public void close() {
        stopQuietly();
        try {
            Runtime.getRuntime().removeShutdownHook(shutdownHook);
        } catch (IllegalStateException shuttingDown) {
            // the hook is running or has run
        }
    }
}
