package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigurationUtils;
import org.apache.flink.configuration.FallbackKey;
import org.apache.flink.configuration.description.Formatter;
import org.apache.flink.configuration.description.TextElement;
import org.junit.jupiter.api.Test;

/**
 * {@code docs/options.md}, the options reference, is generated from the {@link StokerOptions}
 * {@code ConfigOption}s (key, type, default and their own description) and must match them, so it
 * cannot drift from the code. With {@code -Dstoker.options.write=true} the test writes the file
 * instead of comparing it ({@link #REGENERATE}).
 */
class OptionsReferenceTest {
    static final Path REFERENCE = Path.of("..", "docs", "options.md");
    static final String REGENERATE =
            "mvn -pl job -am test -Dtest=OptionsReferenceTest"
                    + " -Dsurefire.failIfNoSpecifiedTests=false -Dstoker.options.write=true";

    @Test
    void docsOptionsMdIsGeneratedFromStokerOptions() throws IOException {
        String rendered = render();
        if (Boolean.getBoolean("stoker.options.write")) {
            Files.writeString(REFERENCE, rendered, StandardCharsets.UTF_8);
            return;
        }
        String written =
                Files.exists(REFERENCE)
                        ? Files.readString(REFERENCE, StandardCharsets.UTF_8)
                        : "(missing)\n";
        if (!written.equals(rendered)) {
            fail(
                    "docs/options.md is generated from StokerOptions and differs from it: edit the"
                            + " ConfigOption (its description) in StokerOptions.java, never the file,"
                            + " and regenerate the file with%n  %s%nFirst difference: %s",
                    REGENERATE, firstDifference(written, rendered));
        }
    }

    /** Where two texts first differ: the line number and both lines. */
    private static String firstDifference(String written, String rendered) {
        String[] a = written.split("\n", -1);
        String[] b = rendered.split("\n", -1);
        int line = 0;
        while (line < a.length && line < b.length && a[line].equals(b[line])) {
            line++;
        }
        return String.format(
                "line %d is%n  %s%nand should be%n  %s",
                line + 1,
                line < a.length ? a[line] : "(end of file)",
                line < b.length ? b[line] : "(end of file)");
    }

    @Test
    void everyOptionHasADescription() {
        assertThat(options())
                .allSatisfy(
                        f ->
                                assertThat(markdown(option(f)))
                                        .as(option(f).key() + " has a description")
                                        .isNotBlank());
    }

    /** The whole of {@code docs/options.md}. */
    static String render() {
        StringBuilder md = new StringBuilder();
        md.append(
                        "<!-- Generated from StokerOptions.java by OptionsReferenceTest; do not edit. -->\n")
                .append("# Options reference\n\n")
                .append("_Generated from the `ConfigOption`s of")
                .append(
                        " [`StokerOptions`](../job/src/main/java/dev/stoker/job/StokerOptions.java)")
                .append(" and checked by `OptionsReferenceTest`: edit a description there, then")
                .append(" regenerate this file with_\n\n")
                .append("```bash\n")
                .append(REGENERATE)
                .append("\n```\n\n")
                .append(
                        "Every option is a Flink `ConfigOption`: pass it as a `--key value` program")
                .append(" argument to `flink run` (or `./stoker demo`), or set it in the Flink")
                .append(" configuration (`config.yaml`, `-D key=value`). An unknown `stoker.*` key")
                .append(" stops the job at start-up, naming the known ones. The job's effective")
                .append(" options, defaults included and secrets masked, are in the web UI under")
                .append(" the job's *Configuration* tab. Defaults are in Flink's notation")
                .append(" (`1 min`, `256 mb`); *(none)* means unset, and where the description")
                .append(" says *preset*, the value of `stoker.model.preset` applies. Options whose")
                .append(" key has a fallback also read Flink's own key (Flink's S3 filesystem")
                .append(" plugin's), so one setting serves both.\n\n")
                .append("| Key | Type | Default | Description |\n")
                .append("|---|---|---|---|\n");
        for (Field field : options()) {
            ConfigOption<?> option = option(field);
            md.append("| ")
                    .append(key(option))
                    .append(" | ")
                    .append(type(field))
                    .append(" | ")
                    .append(defaultValue(option))
                    .append(" | ")
                    .append(markdown(option))
                    .append(enumValues(field))
                    .append(" |\n");
        }
        return md.toString();
    }

    /** The public static {@code ConfigOption} fields of {@link StokerOptions}, by key. */
    private static List<Field> options() {
        return Arrays.stream(StokerOptions.class.getFields())
                .filter(f -> ConfigOption.class.isAssignableFrom(f.getType()))
                .sorted(Comparator.comparing(f -> option(f).key()))
                .toList();
    }

    private static ConfigOption<?> option(Field field) {
        try {
            return (ConfigOption<?>) field.get(null);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String key(ConfigOption<?> option) {
        List<String> fallbacks = new ArrayList<>();
        for (FallbackKey fallback : option.fallbackKeys()) {
            fallbacks.add("`" + fallback.getKey() + "`");
        }
        String key = "`" + option.key() + "`";
        return fallbacks.isEmpty() ? key : key + "<br>(or " + String.join(", ", fallbacks) + ")";
    }

    /**
     * The option's value type, from the field's generic type, as Flink's documentation names it.
     */
    private static String type(Field field) {
        Type value = valueType(field);
        if (value instanceof ParameterizedType list) {
            return "List&lt;"
                    + ((Class<?>) list.getActualTypeArguments()[0]).getSimpleName()
                    + "&gt;";
        }
        Class<?> clazz = (Class<?>) value;
        return clazz.isEnum() ? "Enum" : clazz.getSimpleName();
    }

    /** {@code T} of the field's {@code ConfigOption<T>}. */
    private static Type valueType(Field field) {
        return ((ParameterizedType) field.getGenericType()).getActualTypeArguments()[0];
    }

    private static String enumValues(Field field) {
        Type value = valueType(field);
        if (!(value instanceof Class<?> clazz) || !clazz.isEnum()) {
            return "";
        }
        return "<br>Possible values: "
                + Arrays.stream(clazz.getEnumConstants())
                        .map(c -> "`" + ((Enum<?>) c).name() + "`")
                        .collect(Collectors.joining(", "))
                + ".";
    }

    /** The default in Flink's own string notation ({@code 1 min}, {@code 256 mb}, {@code a;b}). */
    private static String defaultValue(ConfigOption<?> option) {
        if (!option.hasDefaultValue()) {
            return "(none)";
        }
        String value = ConfigurationUtils.convertValue(option.defaultValue(), String.class);
        return value.isEmpty() ? "(empty)" : "`" + value.replace("|", "\\|") + "`";
    }

    /** The option's {@code Description}, formatted by Flink's formatter for a Markdown cell. */
    static String markdown(ConfigOption<?> option) {
        return new MarkdownFormatter().format(option.description()).trim();
    }

    /**
     * Flink's description formatter for one Markdown table cell: text with the characters Markdown
     * would take for syntax escaped, code as code spans, line breaks and lists as {@code <br>}.
     */
    static final class MarkdownFormatter extends Formatter {
        private static final Pattern SYNTAX = Pattern.compile("[\\\\`*|<\\[\\]]|(?<![A-Za-z0-9])_");

        /** Files of the repository that descriptions name, made links. */
        private static final Pattern REPO_FILE =
                Pattern.compile("\\b(?:docs|bench)/[A-Za-z0-9-]+\\.md\\b");

        @Override
        protected void formatLink(StringBuilder state, String link, String description) {
            state.append('[').append(description).append("](").append(link).append(')');
        }

        @Override
        protected void formatLineBreak(StringBuilder state) {
            state.append("<br>");
        }

        @Override
        protected void formatText(
                StringBuilder state,
                String format,
                String[] elements,
                EnumSet<TextElement.TextStyle> styles) {
            boolean code = styles.contains(TextElement.TextStyle.CODE);
            String text = String.format(code ? format : escape(format), (Object[]) elements);
            state.append(code ? "`" + text + "`" : text);
        }

        @Override
        protected void formatList(StringBuilder state, String[] entries) {
            for (String entry : entries) {
                state.append("<br>- ").append(entry);
            }
        }

        @Override
        protected Formatter newInstance() {
            return new MarkdownFormatter();
        }

        private static String escape(String text) {
            Matcher m = SYNTAX.matcher(text);
            StringBuilder escaped = new StringBuilder();
            while (m.find()) {
                m.appendReplacement(escaped, Matcher.quoteReplacement("\\" + m.group()));
            }
            return REPO_FILE
                    .matcher(m.appendTail(escaped).toString())
                    .replaceAll(
                            r ->
                                    Matcher.quoteReplacement(
                                            "[" + r.group() + "](" + link(r.group()) + ")"));
        }

        /** A repository file named in a description, relative to docs/. */
        private static String link(String file) {
            return file.startsWith("docs/") ? file.substring("docs/".length()) : "../" + file;
        }
    }
}
