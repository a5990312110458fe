# Sourced by transform-ceiling.sh and resize-jdk.sh: builds the operators module and its test
# classpath from this checkout, writes the JPEG sets (bench/make_jpeg_sets.py) into $WORK and sets
# CP (the classpath of TransformCeilingBench) and JAVA_OPTS (heap, GC, logging). Needs VENV.
WORK=bench/.work
CP_FILE=$(pwd)/operators/target/test-classpath.txt
mkdir -p "$WORK"
# -am: the modules come from this checkout, not from ~/.m2
mvn -o -q -B -pl operators -am test-compile -Dspotless.check.skip=true -Dcheckstyle.skip
mvn -o -q -B -pl operators dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$CP_FILE"
"$VENV/bin/python" bench/make_jpeg_sets.py ../shared/data "$WORK"
CP="operators/target/test-classes:operators/target/classes:$(cat "$CP_FILE")"
JAVA_OPTS="-Xms2g -Xmx2g -XX:+UseParallelGC -Dlog4j.configurationFile=file:$(pwd)/operators/src/test/resources/log4j2-test.properties"
