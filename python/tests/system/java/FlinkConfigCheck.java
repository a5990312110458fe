/*
 * Checks configuration keys and values against the ConfigOptions that Flink (and the job) declare,
 * as Flink itself reads them. Used by python/tests/system/test_kubernetes.py; run it in Java's
 * source-file mode on the classpath whose options count:
 *
 *   java -cp '<flink home>/lib/*:<plugin jars>:<job jar>' FlinkConfigCheck.java JAR... < keys.tsv
 *
 * It loads every class of the JARs named (those of org.apache.flink and dev.stoker only, none of
 * Flink's shaded libraries) whose name ends in Options, Config or Parameters, or that lives in a
 * ...configuration package (a JAR named as all:JAR: every top-level class of those packages, for
 * plugins whose options live in their factories), and collects their static ConfigOption fields: the key (with the prefix of a
 * Documentation.SuffixOption, and a <placeholder> such as external-resource.<resource_name>.amount
 * matching one dot-free name), its fallback and deprecated keys, and the field's value type.
 *
 * Input: one "key TAB value" line per setting. Output: one line per setting,
 *   key TAB status TAB type TAB detail
 * with status OK, UNKNOWN (no option has that key), DEPRECATED (only a deprecated key of an option
 * matches; detail names the option's key) or BAD_VALUE (Flink's own conversion of the value to the
 * option's type fails; detail is its message). A key matching several options (a specific one and
 * a catch-all such as metrics.reporter.<name>.<parameter>) is checked against the ones with the
 * fewest placeholders. Classes that fail to load are reported on stderr.
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.Map;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.annotation.docs.Documentation;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.FallbackKey;

public class FlinkConfigCheck {
    private static final Pattern CLASS =
            Pattern.compile(
                    "(org/apache/flink|dev/stoker)/(.*/)?"
                            + "([A-Za-z0-9]*(Options|Config|Parameters)|configuration/[A-Za-z0-9$]+)"
                            + "\\.class");
    private static final Pattern ALL = Pattern.compile("(org/apache/flink|dev/stoker)/.*\\.class");
    private static final Pattern PLACEHOLDER = Pattern.compile("<[^>]+>");

    /** One key an option answers to. */
    record Key(String key, Pattern pattern, int placeholders, boolean deprecated, Entry entry) {}

    /** One ConfigOption and where it was declared. */
    record Entry(ConfigOption<?> option, String type, String declaredIn) {}

    public static void main(String[] args) throws Exception {
        List<Key> keys = new ArrayList<>();
        int classes = 0;
        for (String arg : args) {
            boolean all = arg.startsWith("all:");
            try (JarFile file = new JarFile(all ? arg.substring(4) : arg)) {
                for (Enumeration<JarEntry> e = file.entries(); e.hasMoreElements(); ) {
                    String name = e.nextElement().getName();
                    boolean candidate =
                            all
                                    ? ALL.matcher(name).matches() && !name.contains("$")
                                    : CLASS.matcher(name).matches();
                    if (!candidate || name.contains("/shaded/")) {
                        continue;
                    }
                    String className = name.substring(0, name.length() - 6).replace('/', '.');
                    Class<?> type;
                    try {
                        type = Class.forName(className, true, FlinkConfigCheck.class.getClassLoader());
                    } catch (Throwable t) {
                        System.err.println("not loaded: " + className + ": " + t);
                        continue;
                    }
                    classes++;
                    collect(type, keys);
                }
            }
        }
        System.err.println("options: " + keys.size() + " keys of " + classes + " classes");
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isEmpty()) {
                continue;
            }
            int tab = line.indexOf('\t');
            String key = line.substring(0, tab);
            String value = line.substring(tab + 1);
            System.out.println(key + "\t" + check(key, value, keys));
        }
    }

    private static void collect(Class<?> type, List<Key> keys) {
        Field[] fields;
        try {
            fields = type.getDeclaredFields();
        } catch (Throwable t) {
            System.err.println("no fields: " + type.getName() + ": " + t);
            return;
        }
        for (Field field : fields) {
            if (!Modifier.isStatic(field.getModifiers())
                    || !ConfigOption.class.isAssignableFrom(field.getType())) {
                continue;
            }
            ConfigOption<?> option;
            try {
                field.setAccessible(true);
                option = (ConfigOption<?>) field.get(null);
            } catch (Throwable t) {
                System.err.println("not read: " + type.getName() + "." + field.getName() + ": " + t);
                continue;
            }
            if (option == null) {
                continue;
            }
            Documentation.SuffixOption suffix =
                    field.getAnnotation(Documentation.SuffixOption.class);
            String prefix = suffix == null ? "" : suffix.value() + ".";
            String valueType = field.getGenericType().getTypeName();
            valueType = valueType.replaceAll("^[^<]*<(.*)>$", "$1").replaceAll("[a-z.]+\\.", "");
            Entry entry = new Entry(option, valueType, type.getName() + "." + field.getName());
            keys.add(key(prefix + option.key(), false, entry));
            for (FallbackKey fallback : option.fallbackKeys()) {
                keys.add(key(prefix + fallback.getKey(), fallback.isDeprecated(), entry));
            }
        }
    }

    private static Key key(String key, boolean deprecated, Entry entry) {
        StringBuilder regex = new StringBuilder();
        Matcher m = PLACEHOLDER.matcher(key);
        int last = 0;
        int placeholders = 0;
        while (m.find()) {
            regex.append(Pattern.quote(key.substring(last, m.start()))).append("[^.]+");
            last = m.end();
            placeholders++;
        }
        regex.append(Pattern.quote(key.substring(last)));
        return new Key(key, Pattern.compile(regex.toString()), placeholders, deprecated, entry);
    }

    private static String check(String key, String value, List<Key> keys) {
        List<Key> matches = new ArrayList<>();
        for (Key k : keys) {
            if (k.pattern().matcher(key).matches()) {
                matches.add(k);
            }
        }
        if (matches.isEmpty()) {
            return "UNKNOWN\t\t";
        }
        int fewest = matches.stream().mapToInt(Key::placeholders).min().getAsInt();
        List<Key> best = matches.stream().filter(k -> k.placeholders() == fewest).toList();
        // an option's own key before another option's fallback key (rest.port: RestOptions.PORT,
        // also the fallback of rest.bind-port); the value must suit every one of them
        List<Key> current =
                best.stream()
                        .filter(k -> !k.deprecated())
                        .sorted(
                                java.util.Comparator.comparing(
                                        (Key k) -> !k.entry().option().key().equals(k.key())))
                        .toList();
        Key chosen = current.isEmpty() ? best.get(0) : current.get(0);
        Entry entry = chosen.entry();
        for (Key k : current.isEmpty() ? best : current) {
            ConfigOption<?> option = k.entry().option();
            try {
                Configuration.fromMap(Map.of(option.key(), value)).get(option);
            } catch (RuntimeException e) {
                return "BAD_VALUE\t" + k.entry().type() + "\t" + oneLine(e.toString());
            }
        }
        if (current.isEmpty()) {
            return "DEPRECATED\t" + entry.type() + "\tuse " + entry.option().key();
        }
        return "OK\t" + entry.type() + "\t" + entry.declaredIn();
    }

    private static String oneLine(String s) {
        return s.replaceAll("\\s+", " ");
    }
}
