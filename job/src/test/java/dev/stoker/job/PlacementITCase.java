package dev.stoker.job;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The placement spike of issue 21 (docs/multi-node.md, "Placement"): does Flink 2.3's fine-grained
 * resource management pin subtasks to TaskManagers by external resource name?
 *
 * <p>A real standalone cluster ({@code scripts/cluster.sh}: a JobManager and three TaskManager
 * JVMs, each TaskManager with its own config dir): one CPU TaskManager declaring {@code stoker-cpu:
 * 4} and one edge TaskManager per simulated GPU node {@code n} declaring {@code stoker-node-n: 2}
 * (its ranks). {@link PlacementSpikeJob} puts its CPU stage in a slot sharing group requesting
 * {@code stoker-cpu: 1} and node {@code n}'s sink in one requesting {@code stoker-node-n: 1}. The
 * placement is read back from the REST API ({@code /jobs/:id/vertices/:vid} per-subtask {@code
 * taskmanager-id}; {@code /taskmanagers/:id} for the resources that TaskManager declares and the
 * profiles of its allocated slots), so the check does not rely on the test's own bookkeeping.
 *
 * <ul>
 *   <li>With the default scheduler every CPU-stage subtask runs on the CPU TaskManager and node
 *       {@code n}'s sinks on node {@code n}'s edge TaskManager, in slots of exactly the requested
 *       profile. After SIGKILL of an edge TaskManager the job restarts and waits for a slot with
 *       the lost resource; when the slot request times out ({@code slot.request.timeout}, short
 *       here) it fails with {@code NoResourceAvailableException} and tries again, and at no time
 *       are those sinks placed elsewhere. Once an edge TaskManager with that resource registers,
 *       the job runs again with those sinks on it.
 *   <li>With {@code jobmanager.scheduler: adaptive} the requested profiles are not used: the slots
 *       are the TaskManagers' default slots (their resources split evenly), whatever the job asked.
 * </ul>
 *
 * <p>Prints the placement tables and timings (docs/multi-node.md records a run). Every process of a
 * cluster is stopped at the end of its test, also on failure.
 */
class PlacementITCase {
    private static final int NODES = 2;
    private static final int RANKS_PER_NODE = 2;
    private static final int CPU_PARALLELISM = 2;

    /**
     * How long a pending slot request waits (Flink's default is 5 min; shortened so the test sees
     * what happens when it expires).
     */
    private static final Duration SLOT_REQUEST_TIMEOUT = Duration.ofSeconds(20);

    /** Restarts that found no slot with the lost resource, observed before the node comes back. */
    private static final int FAILED_ATTEMPTS_WATCHED = 2;

    private static final String NO_RESOURCE =
            "org.apache.flink.runtime.jobmanager.scheduler.NoResourceAvailableException";

    private static final Set<String> PLACED = Set.of("DEPLOYING", "INITIALIZING", "RUNNING");

    @TempDir static Path tmp;
    private static Path jar;

    /** The spike job's classes (from target/test-classes) as a job jar for {@code flink run}. */
    @BeforeAll
    static void buildJobJar() throws IOException {
        Path classes = Path.of("target/test-classes");
        String dir = PlacementSpikeJob.class.getPackageName().replace('.', '/');
        jar = tmp.resolve("placement-spike.jar");
        try (JarOutputStream out = new JarOutputStream(Files.newOutputStream(jar));
                Stream<Path> files = Files.list(classes.resolve(dir))) {
            for (Path f :
                    files.filter(
                                    p ->
                                            p.getFileName()
                                                    .toString()
                                                    .startsWith(
                                                            PlacementSpikeJob.class
                                                                    .getSimpleName()))
                            .toList()) {
                out.putNextEntry(new JarEntry(dir + "/" + f.getFileName()));
                try (var in = Files.newInputStream(f)) {
                    in.transferTo((OutputStream) out);
                }
                out.closeEntry();
            }
        }
    }

    private static Map<String, String> declares(String resource, int amount) {
        Map<String, String> conf = new LinkedHashMap<>();
        conf.put("external-resources", resource);
        conf.put("external-resource." + resource + ".amount", Integer.toString(amount));
        return conf;
    }

    /** One CPU TaskManager and one edge TaskManager per node; their indices, CPU first. */
    private static int[] startTaskManagers(StandaloneCluster cluster) throws IOException {
        int[] tms = new int[NODES + 1];
        tms[0] = cluster.addTaskManager(declares(PlacementSpikeJob.CPU_RESOURCE, 4));
        for (int n = 0; n < NODES; n++) {
            tms[n + 1] =
                    cluster.addTaskManager(
                            declares(PlacementSpikeJob.nodeResource(n), RANKS_PER_NODE));
        }
        return tms;
    }

    private static String submit(StandaloneCluster cluster) throws IOException {
        return cluster.submit(
                jar,
                PlacementSpikeJob.class.getName(),
                Integer.toString(NODES),
                Integer.toString(RANKS_PER_NODE),
                Integer.toString(CPU_PARALLELISM));
    }

    /** One subtask's current execution: its status and the TaskManager it is (or was) on. */
    private record Subtask(String vertex, int index, String status, String taskManager) {
        boolean placed() {
            return PLACED.contains(status);
        }
    }

    private static List<Subtask> subtasks(StandaloneCluster cluster, String jobId)
            throws IOException, InterruptedException {
        List<Subtask> out = new ArrayList<>();
        for (JsonNode v : cluster.get("/jobs/" + jobId).get("vertices")) {
            JsonNode detail = cluster.get("/jobs/" + jobId + "/vertices/" + v.get("id").asText());
            for (JsonNode s : detail.get("subtasks")) {
                out.add(
                        new Subtask(
                                v.get("name").asText(),
                                s.get("subtask").asInt(),
                                s.get("status").asText(),
                                s.path("taskmanager-id").asText("(unassigned)")));
            }
        }
        return out;
    }

    /** The external resource a vertex's subtasks must run on. */
    private static String requiredResource(String vertex) {
        for (int n = 0; n < NODES; n++) {
            if (vertex.startsWith(PlacementSpikeJob.sinkName(n))) {
                return PlacementSpikeJob.nodeResource(n);
            }
        }
        return PlacementSpikeJob.CPU_RESOURCE;
    }

    /** The external resources each registered TaskManager declares (from its REST details). */
    private static Map<String, Set<String>> declaredResources(StandaloneCluster cluster)
            throws IOException, InterruptedException {
        Map<String, Set<String>> out = new TreeMap<>();
        for (JsonNode tm : cluster.get("/taskmanagers").get("taskmanagers")) {
            String id = tm.get("id").asText();
            Set<String> names = new LinkedHashSet<>();
            cluster.get("/taskmanagers/" + id)
                    .get("totalResource")
                    .get("extendedResources")
                    .fieldNames()
                    .forEachRemaining(names::add);
            out.put(id, names);
        }
        return out;
    }

    private static List<Subtask> awaitAllRunning(
            StandaloneCluster cluster, String jobId, Duration timeout) throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        List<Subtask> last = List.of();
        while (System.nanoTime() < deadline) {
            try {
                last = subtasks(cluster, jobId);
                if (!last.isEmpty() && last.stream().allMatch(s -> s.status().equals("RUNNING"))) {
                    return last;
                }
            } catch (IOException e) {
                // the JobManager is busy or the job not yet known
            }
            Thread.sleep(250);
        }
        return fail(
                "job "
                        + jobId
                        + " did not run all subtasks within "
                        + timeout
                        + ": "
                        + last
                        + "\n"
                        + tail(cluster.jobManagerLog()));
    }

    private static String tail(String log) {
        return log.substring(Math.max(0, log.length() - 6000));
    }

    /** The placement table: one line per subtask, with the resources of its TaskManager. */
    private static String table(List<Subtask> subtasks, Map<String, Set<String>> resources) {
        StringBuilder sb = new StringBuilder();
        for (Subtask s : subtasks) {
            sb.append(
                    String.format(
                            "  %-62s #%d %-9s on %-14s %s%n",
                            s.vertex(),
                            s.index(),
                            s.status(),
                            s.taskManager(),
                            resources.getOrDefault(s.taskManager(), Set.of())));
        }
        return sb.toString();
    }

    /**
     * Subtasks placed on a registered TaskManager that lacks the resource their group requests (a
     * subtask still shown on a TaskManager that is gone is not counted).
     */
    private static List<Subtask> misplaced(
            List<Subtask> subtasks, Map<String, Set<String>> resources) {
        return subtasks.stream()
                .filter(Subtask::placed)
                .filter(s -> resources.containsKey(s.taskManager()))
                .filter(s -> !resources.get(s.taskManager()).contains(requiredResource(s.vertex())))
                .toList();
    }

    private static void assertOnRegisteredTaskManagers(
            List<Subtask> subtasks, Map<String, Set<String>> resources) {
        for (Subtask s : subtasks) {
            assertTrue(resources.containsKey(s.taskManager()), s + " is on an unknown TaskManager");
        }
    }

    /** The profiles (cpu, heap MB, managed MB, extended resources) of each TM's allocated slots. */
    private static Map<String, List<String>> allocatedSlots(StandaloneCluster cluster)
            throws IOException, InterruptedException {
        Map<String, List<String>> out = new TreeMap<>();
        for (String id : declaredResources(cluster).keySet()) {
            List<String> slots = new ArrayList<>();
            for (JsonNode slot : cluster.get("/taskmanagers/" + id).get("allocatedSlots")) {
                JsonNode r = slot.get("resource");
                slots.add(
                        "cpu="
                                + r.get("cpuCores").asDouble()
                                + " heap="
                                + r.get("taskHeapMemory").asInt()
                                + "MB managed="
                                + r.get("managedMemory").asInt()
                                + "MB "
                                + r.get("extendedResources"));
            }
            out.put(id, slots);
        }
        return out;
    }

    @Test
    void defaultSchedulerPinsEachGroupToTaskManagersDeclaringItsResource() throws Exception {
        Map<String, String> conf =
                Map.of("slot.request.timeout", SLOT_REQUEST_TIMEOUT.toMillis() + "ms");
        try (StandaloneCluster cluster = new StandaloneCluster(tmp.resolve("default"), conf)) {
            long t0 = System.nanoTime();
            int[] tms = startTaskManagers(cluster);
            long clusterUp = System.nanoTime();
            String jobId = submit(cluster);
            List<Subtask> running = awaitAllRunning(cluster, jobId, Duration.ofSeconds(60));
            long jobRunning = System.nanoTime();
            Map<String, Set<String>> resources = declaredResources(cluster);
            System.out.printf(
                    "[placement] default scheduler: cluster up in %.1f s, job running %.1f s"
                            + " after submission%n%s",
                    seconds(clusterUp - t0),
                    seconds(jobRunning - clusterUp),
                    table(running, resources));
            assertEquals(CPU_PARALLELISM + NODES * RANKS_PER_NODE, running.size(), "subtasks");
            assertOnRegisteredTaskManagers(running, resources);
            assertEquals(List.of(), misplaced(running, resources), "misplaced subtasks");
            // each slot is exactly the requested profile (fine-grained), never a default slot
            Map<String, List<String>> slots = allocatedSlots(cluster);
            System.out.println("[placement] allocated slots: " + slots);
            for (Map.Entry<String, List<String>> e : slots.entrySet()) {
                String resource = resources.get(e.getKey()).iterator().next();
                for (String slot : e.getValue()) {
                    assertEquals(
                            "cpu=0.25 heap=32MB managed="
                                    + (resource.equals(PlacementSpikeJob.CPU_RESOURCE) ? 0 : 32)
                                    + "MB {\""
                                    + resource
                                    + "\":1.0}",
                            slot,
                            e.getKey());
                }
            }

            // A GPU node dies: SIGKILL its edge TaskManager and watch where the scheduler puts that
            // node's sinks over several restart attempts.
            String lostResource = PlacementSpikeJob.nodeResource(NODES - 1);
            cluster.killTaskManager(tms[NODES]);
            long killed = System.nanoTime();
            long killedAtMillis = System.currentTimeMillis();
            List<String> transitions = new ArrayList<>();
            String lastState = "RUNNING";
            Long restarting = null;
            long deadline = killed + SLOT_REQUEST_TIMEOUT.plusSeconds(60).toNanos();
            while (System.nanoTime() < deadline
                    && noResourceFailures(cluster, jobId) < FAILED_ATTEMPTS_WATCHED) {
                try {
                    String state = cluster.get("/jobs/" + jobId).get("state").asText();
                    if (!state.equals(lastState)) {
                        transitions.add(
                                String.format(
                                        "%.1fs %s", seconds(System.nanoTime() - killed), state));
                        lastState = state;
                    }
                    List<Subtask> now = subtasks(cluster, jobId);
                    // the job is RESTARTING only for the restart delay, which a poll can miss on a
                    // loaded box; its subtasks stay out of RUNNING while they wait for a slot
                    if (restarting == null
                            && (!state.equals("RUNNING")
                                    || now.stream().anyMatch(t -> !t.status().equals("RUNNING")))) {
                        restarting = System.nanoTime();
                    }
                    Map<String, Set<String>> live = declaredResources(cluster);
                    // in particular no sink of the lost node on a TaskManager of another node
                    assertEquals(List.of(), misplaced(now, live), "misplaced after the kill");
                } catch (IOException e) {
                    transitions.add("(REST: " + e.getMessage() + ")");
                }
                Thread.sleep(250);
            }
            List<Subtask> waiting = subtasks(cluster, jobId);
            StringBuilder exceptions = new StringBuilder();
            for (JsonNode e :
                    cluster.get("/jobs/" + jobId + "/exceptions")
                            .get("exceptionHistory")
                            .get("entries")) {
                String trace = e.get("stacktrace").asText();
                exceptions.append(
                        String.format(
                                "  %.1fs %s%n",
                                (e.get("timestamp").asLong() - killedAtMillis) / 1000.0,
                                trace.lines()
                                        .findFirst()
                                        .orElse("")
                                        .replaceAll("(.{300}).*", "$1")));
            }
            System.out.printf(
                    "[placement] after SIGKILL of the edge TaskManager of %s (times after the"
                            + " kill): job states %s; exception history:%n%s%s",
                    lostResource,
                    transitions,
                    exceptions,
                    table(waiting, declaredResources(cluster)));
            assertFalse(lastState.equals("FAILED"), "the job failed: " + transitions);
            assertNotEquals(null, restarting, "the job never restarted after the kill");
            assertTrue(
                    noResourceFailures(cluster, jobId) >= FAILED_ATTEMPTS_WATCHED,
                    "restart attempts that found no slot for the lost node's sinks");

            // The node comes back: a new edge TaskManager declaring the same resource.
            long back = System.nanoTime();
            int replacement = cluster.addTaskManager(declares(lostResource, RANKS_PER_NODE));
            long registered = System.nanoTime();
            List<Subtask> again = awaitAllRunning(cluster, jobId, Duration.ofSeconds(90));
            long rerunning = System.nanoTime();
            resources = declaredResources(cluster);
            System.out.printf(
                    "[placement] edge TaskManager %d (%s) registered after %.1f s; all subtasks"
                            + " running %.1f s later%n%s",
                    replacement,
                    lostResource,
                    seconds(registered - back),
                    seconds(rerunning - registered),
                    table(again, resources));
            assertOnRegisteredTaskManagers(again, resources);
            assertEquals(List.of(), misplaced(again, resources), "misplaced after the restart");
            assertTrue(
                    again.stream()
                            .filter(s -> requiredResource(s.vertex()).equals(lostResource))
                            .allMatch(s -> s.taskManager().equals("taskmanager-" + replacement)),
                    "the lost node's sinks are not on its new TaskManager: " + again);
        }
    }

    @Test
    void adaptiveSchedulerIgnoresTheResourceProfiles() throws Exception {
        Map<String, String> conf = Map.of("jobmanager.scheduler", "adaptive");
        try (StandaloneCluster cluster = new StandaloneCluster(tmp.resolve("adaptive"), conf)) {
            startTaskManagers(cluster);
            String jobId = submit(cluster);
            List<Subtask> running = awaitAllRunning(cluster, jobId, Duration.ofSeconds(60));
            Map<String, Set<String>> resources = declaredResources(cluster);
            List<Subtask> misplaced = misplaced(running, resources);
            Map<String, List<String>> slots = allocatedSlots(cluster);
            System.out.printf(
                    "[placement] adaptive scheduler: %d of %d subtasks on a TaskManager without"
                            + " their resource%n%s[placement] allocated slots: %s%n",
                    misplaced.size(), running.size(), table(running, resources), slots);
            assertTrue(
                    cluster.jobManagerLog().contains("scheduler.adaptive.AdaptiveScheduler"),
                    "the JobManager did not use the adaptive scheduler");
            // Every slot is a default slot: the TaskManager's resources split evenly over its
            // slots (cpu 1.0 of 2 cores, half of each declared resource), not the group's profile.
            for (Map.Entry<String, List<String>> e : slots.entrySet()) {
                String resource = resources.get(e.getKey()).iterator().next();
                double half = (resource.equals(PlacementSpikeJob.CPU_RESOURCE) ? 4 : 2) / 2.0;
                for (String slot : e.getValue()) {
                    assertTrue(
                            slot.startsWith("cpu=1.0 ")
                                    && slot.endsWith("{\"" + resource + "\":" + half + "}"),
                            e.getKey() + " has a slot that is not a default slot: " + slot);
                }
            }
        }
    }

    /** Restart attempts that failed for want of a slot ({@code NoResourceAvailableException}). */
    private static int noResourceFailures(StandaloneCluster cluster, String jobId)
            throws IOException, InterruptedException {
        int n = 0;
        for (JsonNode e :
                cluster.get("/jobs/" + jobId + "/exceptions")
                        .get("exceptionHistory")
                        .get("entries")) {
            n += e.get("stacktrace").asText().contains(NO_RESOURCE) ? 1 : 0;
        }
        return n;
    }

    private static double seconds(long nanos) {
        return nanos / 1e9;
    }
}
