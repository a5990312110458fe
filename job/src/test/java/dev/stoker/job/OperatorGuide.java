package dev.stoker.job;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** What the tests read from the operator guide (docs/operator-guide.md). */
final class OperatorGuide {
    private static final Pattern REST_ID = Pattern.compile("`([a-z-]+(?:__Writer)?\\.[^` ]+)`");

    private OperatorGuide() {}

    /**
     * The REST metric ids of the "Watch" table's third column, in table order, with their
     * placeholders ({@code <r>}, {@code <name>}, {@code <REASON>}) as written.
     */
    static List<String> watchTableMetricIds() throws IOException {
        String guide = Files.readString(Path.of("..", "docs", "operator-guide.md"));
        String table =
                guide.substring(
                        guide.indexOf("| operator | vertex in the web UI | REST metric id |"));
        table = table.substring(0, table.indexOf("\n\n"));
        List<String> ids = new ArrayList<>();
        for (String row : table.split("\n")) {
            String[] cells = row.split("\\|");
            if (cells.length < 4 || cells[3].contains("---")) {
                continue;
            }
            Matcher m = REST_ID.matcher(cells[3]);
            while (m.find()) {
                ids.add(m.group(1));
            }
        }
        return ids;
    }
}
