package dev.stoker.testkit;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.async.AsyncResponseTransformer;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.model.S3Object;

class LocalS3ServerTest {

    private static Path dataset(Path dir) throws Exception {
        Files.createDirectories(dir.resolve("images/sub"));
        Files.writeString(dir.resolve("train.jsonl"), "{\"id\": 1}\n");
        Files.write(dir.resolve("images/sub/a.bin"), new byte[] {0, 1, 2, (byte) 255});
        return dir;
    }

    @Test
    void uploadsEveryFileUnderItsRelativePathThroughTheS3Api(@TempDir Path tmp) throws Exception {
        Path dir = dataset(tmp.resolve("data"));
        try (LocalS3Server s3 = new LocalS3Server().start()) {
            assertThat(s3.uploadDirectory(dir, "bucket", "prefix")).isEqualTo(2);
            List<String> keys =
                    s3.client().listObjectsV2(r -> r.bucket("bucket")).join().contents().stream()
                            .map(S3Object::key)
                            .sorted()
                            .toList();
            assertThat(keys).containsExactly("prefix/images/sub/a.bin", "prefix/train.jsonl");
            byte[] got =
                    s3.client()
                            .getObject(
                                    r -> r.bucket("bucket").key("prefix/images/sub/a.bin"),
                                    AsyncResponseTransformer.toBytes())
                            .join()
                            .asByteArray();
            assertThat(got).isEqualTo(Files.readAllBytes(dir.resolve("images/sub/a.bin")));
        }
    }

    /**
     * As a program (./stoker demo): the endpoint line comes after the upload, as the last line, so
     * a reader of its output that sees it can use the bucket at once; closing its standard input
     * ends it.
     */
    @Test
    void asAProgramItPrintsItsEndpointOnlyOnceTheUploadIsReadableAndEndsWithItsStdin(
            @TempDir Path tmp) throws Exception {
        Path dir = dataset(tmp.resolve("data"));
        Process server =
                new ProcessBuilder(
                                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                                "-cp",
                                System.getProperty("java.class.path"),
                                LocalS3Server.class.getName(),
                                "--port",
                                "0",
                                "--basedir",
                                tmp.resolve("s3").toString(),
                                "--upload",
                                dir.toString(),
                                "s3://demo/sample",
                                "--exit-on-stdin-eof")
                        .redirectError(ProcessBuilder.Redirect.DISCARD)
                        .start();
        try {
            List<String> lines = new ArrayList<>();
            BufferedReader out =
                    new BufferedReader(
                            new InputStreamReader(server.getInputStream(), StandardCharsets.UTF_8));
            String line;
            while ((line = out.readLine()) != null && !line.startsWith("endpoint=")) {
                lines.add(line);
            }
            assertThat(lines).containsExactly("uploaded=2 s3://demo/sample");
            assertThat(line).matches("endpoint=http://127\\.0\\.0\\.1:\\d+");
            String endpoint = line.substring("endpoint=".length());
            assertThat(URI.create(endpoint).getPort()).isPositive();
            // a client of its own, as the job is: the object is there at once
            try (S3AsyncClient client = clientFor(endpoint)) {
                long length =
                        client.headObject(r -> r.bucket("demo").key("sample/train.jsonl"))
                                .join()
                                .contentLength();
                assertThat(length).isEqualTo(Files.size(dir.resolve("train.jsonl")));
            }
            server.getOutputStream().close();
            assertThat(server.waitFor(30, TimeUnit.SECONDS))
                    .as("exited after stdin closed")
                    .isTrue();
            assertThat(server.exitValue()).isZero();
        } finally {
            server.destroyForcibly();
        }
    }

    private static S3AsyncClient clientFor(String endpoint) {
        return S3AsyncClient.builder()
                .endpointOverride(URI.create(endpoint))
                .region(Region.US_EAST_1)
                .forcePathStyle(true)
                .credentialsProvider(
                        StaticCredentialsProvider.create(
                                AwsBasicCredentials.create(
                                        LocalS3Server.ACCESS_KEY, LocalS3Server.SECRET_KEY)))
                .build();
    }
}
