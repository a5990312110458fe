package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.parse.RecordFormat;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class MixtureSpecTest {
    private static final String LOCATION = "/specs/stage1.yaml";

    private static MixtureSpec parse(String yaml) {
        return MixtureSpec.parse(LOCATION, yaml.getBytes(StandardCharsets.UTF_8), "*.jsonl");
    }

    @Test
    void sourcesWithTheirSharesAndSettingsAreRead() {
        MixtureSpec spec =
                parse(
                        """
                        sources:
                          - name: chat
                            path: chat/
                          - name: ocr
                            path: s3://bucket/ocr
                            glob: "train-*.jsonl"
                            repeat: 2.5
                            image_root: ../images
                            max_pixels: 1003520
                            min_pixels: 3136
                            system_prompt: ""
                          - name: web
                            path: /data/web
                            count: 5000
                            max_seq_len: 4096
                        """);
        assertThat(spec.sources).extracting(s -> s.name).containsExactly("chat", "ocr", "web");
        MixtureSpec.Source chat = spec.sources.get(0);
        assertThat(chat.path).isEqualTo("/specs/chat");
        assertThat(chat.glob).isEqualTo("*.jsonl");
        MixtureSpec.Source ocr = spec.sources.get(1);
        assertThat(ocr.path).isEqualTo("s3://bucket/ocr");
        assertThat(ocr.glob).isEqualTo("train-*.jsonl");
        assertThat(ocr.imageRoot).isEqualTo("/images");
        assertThat(ocr.systemPrompt).isEmpty();
        assertThat(ocr.maxPixels).isEqualTo(1003520L);
        assertThat(spec.sources.get(2).maxSeqLen).isEqualTo(4096);
        // chat: repeat 1; ocr: 2.5 x 10 = 25; web: exactly 5000 of 100000
        assertThat(spec.countsPerEpoch(new long[] {7, 10, 100_000})).containsExactly(7, 25, 5000);
    }

    @Test
    void weightsSplitSamplesPerEpochOrAllRecords() {
        MixtureSpec spec =
                parse(
                        """
                        samples_per_epoch: 1000
                        sources:
                          - {name: a, path: a, weight: 3}
                          - {name: b, path: b, weight: 1}
                        """);
        assertThat(spec.countsPerEpoch(new long[] {10, 5000})).containsExactly(750, 250);
        MixtureSpec all =
                parse(
                        """
                        sources:
                          - {name: a, path: a, weight: 1}
                          - {name: b, path: b, weight: 1}
                        """);
        assertThat(all.countsPerEpoch(new long[] {10, 31})).containsExactly(21, 20);
    }

    @Test
    void relativePathsOfAnS3SpecResolveInItsBucket() {
        MixtureSpec spec =
                MixtureSpec.parse(
                        "s3://bucket/mixtures/stage1.yaml",
                        "sources: [{name: a, path: ../sft/a/}]".getBytes(StandardCharsets.UTF_8),
                        "*.jsonl");
        assertThat(spec.sources.get(0).path).isEqualTo("s3://bucket/sft/a/");
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(
            delimiter = '|',
            value = {
                "unknown key|sources: [{name: a, path: a, wieght: 2}]|sources[0] (source 'a'): unknown key 'wieght'",
                "unknown top key|{sources: [{name: a, path: a}], epochs: 2}|unknown key 'epochs'",
                "missing path|sources: [{name: a}]|sources[0] (source 'a') path: is missing",
                "missing name|sources: [{path: a}]|sources[0] name: is missing",
                "zero weight|sources: [{name: a, path: a, weight: 0}]|(source 'a') weight: must be a number > 0, got 0",
                "negative weight|sources: [{name: a, path: a, weight: -1.5}]|(source 'a') weight: must be a number > 0, got -1.5",
                "weight and count|sources: [{name: a, path: a, weight: 1, count: 3}]|(source 'a') weight/repeat/count: give at most one",
                "fractional count|sources: [{name: a, path: a, count: 2.5}]|(source 'a') count: must be an integer >= 1, got 2.5",
                "duplicate name|sources: [{name: a, path: a}, {name: a, path: b}]|sources[1] (source 'a'): duplicate name",
                "bad name|sources: [{name: 'a b', path: a}]|name: must match [A-Za-z0-9._-]+",
                "no sources|sources: []|'sources' must be a non-empty list",
                "not a mapping|- a|must be a mapping with a 'sources' list",
                "some weighted|sources: [{name: a, path: a, weight: 1}, {name: b, path: b}]|source 'b' has no weight while others do",
                "total without weights|{samples_per_epoch: 10, sources: [{name: a, path: a}]}|samples_per_epoch is only for weighted sources",
                "string path|sources: [{name: a, path: 3}]|(source 'a') path: must be a string, got 3",
                "bad format|sources: [{name: a, path: a, format: qwen}]|sources[0] (source 'a') format: must be one of auto, llava, messages, sharegpt, got 'qwen'",
                "bad yaml|sources: [{name: a, path: a|is not valid YAML"
            })
    void aBadSpecNamesTheSpecTheSourceAndTheField(String what, String yaml, String message) {
        assertThatThrownBy(() -> parse(yaml))
                .as(what)
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageStartingWith("--stoker.mixture.path '" + LOCATION + "': ")
                .hasMessageContaining(message);
    }

    @Test
    void eachSourceHasItsRecordFormatInTheCanonicalJson() {
        MixtureSpec auto = parse("sources: [{name: a, path: a}, {name: b, path: b}]");
        assertThat(auto.sources).extracting(s -> s.format).containsOnly(RecordFormat.AUTO);
        MixtureSpec fixed =
                parse("sources: [{name: a, path: a}, {name: b, path: b, format: sharegpt}]");
        assertThat(fixed.sources)
                .extracting(s -> s.format)
                .containsExactly(RecordFormat.AUTO, RecordFormat.SHAREGPT);
        assertThat(auto.canonicalJson())
                .contains("\"format\":\"auto\"")
                .doesNotContain("sharegpt")
                .isNotEqualTo(fixed.canonicalJson())
                .isEqualTo(
                        parse("sources: [{name: a, path: a, format: auto}, {name: b, path: b}]")
                                .canonicalJson());
        assertThat(fixed.canonicalJson()).contains("\"format\":\"sharegpt\"");
    }

    @Test
    void aRepeatThatRoundsToNoRecordIsRejectedNamingTheSource() {
        MixtureSpec spec = parse("sources: [{name: tiny, path: t, repeat: 0.1}]");
        assertThatThrownBy(() -> spec.countsPerEpoch(new long[] {4}))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("source 'tiny': repeat 0.1 of its 4 records is no record");
    }

    @Test
    void theSpecIsReadFromItsPathAndTheDatasetOptionIsTheOneSourceMixture(@TempDir Path dir)
            throws Exception {
        Path file = dir.resolve("mix.yaml");
        Files.writeString(file, "sources: [{name: a, path: data/a}]\n");
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MIXTURE_PATH, file.toString());
        assertThat(MixtureSpec.of(conf).sources.get(0).path)
                .isEqualTo(dir.resolve("data/a").toString());

        Configuration single = new Configuration();
        single.set(StokerOptions.DATASET_PATH, "/data/sft");
        MixtureSpec one = MixtureSpec.of(single);
        assertThat(one.sources).hasSize(1);
        assertThat(one.sources.get(0).name).isEqualTo("dataset");
        assertThat(one.sources.get(0).path).isEqualTo("/data/sft");
        assertThat(one.countsPerEpoch(new long[] {42})).containsExactly(42);
        assertThat(one.sources.get(0).format).isEqualTo(RecordFormat.AUTO);

        conf.set(StokerOptions.MIXTURE_PATH, dir.resolve("missing.yaml").toString());
        assertThatThrownBy(() -> MixtureSpec.of(conf))
                .hasMessageContaining("missing.yaml': cannot be read");
    }
}
