#!/usr/bin/env bash
# Manual compatibility run (not part of CI): the polylb-dubbo test suite against another Dubbo.
#
#   bash bindings/java/run-compat.sh 3.2.x      # newest 3.2 release on Maven Central
#   bash bindings/java/run-compat.sh 3.1.11     # an exact version
#
# As a user gets it, the adapter's main classes are compiled against the Dubbo of pom.xml
# (3.3.6); only the tests are compiled against, and run with, the chosen org.apache.dubbo:dubbo.
# A method the adapter calls that the older Dubbo lacks therefore shows as a NoSuchMethodError,
# not as a compile error. The build runs in a copy of bindings/java (mktemp), so this checkout's
# target/ directories are left as they are; the copy's path is printed for the surefire reports.
#
# Environment: CARGO_TARGET_DIR (default <repo>/target), POLYLB_SKIP_CARGO=1 to use an already
# built libpolylb_jni instead of running cargo, MVN_ARGS for extra Maven arguments (e.g. -o, or
# '-Dsurefire.argLine=-Xcheck:jni --add-opens java.base/java.lang=ALL-UNNAMED').
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
want="${1:?usage: run-compat.sh <dubbo version, e.g. 3.2.19, or a line: 3.2.x>}"

command -v mvn >/dev/null || { echo "run-compat.sh: mvn (Maven 3.8+) is required" >&2; exit 1; }

if [[ "$want" == *.x ]]; then
    line="${want%.x}"
    meta="$(curl -fsS https://repo1.maven.org/maven2/org/apache/dubbo/dubbo/maven-metadata.xml)" \
        || { echo "run-compat.sh: cannot read Maven Central's version list; give an exact version" >&2; exit 1; }
    version="$(printf '%s\n' "$meta" | sed -n 's:.*<version>\(.*\)</version>.*:\1:p' \
        | grep -E "^${line//./\\.}\.[0-9]+$" | sort -t. -k3,3n | tail -1)"
    [[ -n "$version" ]] || { echo "run-compat.sh: no release of Dubbo $line on Maven Central" >&2; exit 1; }
else
    version="$want"
fi
echo "run-compat.sh: org.apache.dubbo:dubbo:$version"

target_dir="${CARGO_TARGET_DIR:-$root/target}"
if [[ "${POLYLB_SKIP_CARGO:-0}" != 1 ]]; then
    (cd "$root" && cargo build --release -p polylb-jni)
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/polylb-compat-$version.XXXXXX")"
tar -C "$here" --exclude='./*/target' --exclude='./target' -cf - . | tar -C "$work" -xf -
cd "$work"
common=(-B -Dpolylb.cargo.skip=true "-Dpolylb.cargo.target.dir=$target_dir" -pl polylb-dubbo -am)
# 1. The adapter as shipped: main classes against the pom's Dubbo.
mvn "${common[@]}" -q ${MVN_ARGS:-} compile
# 2. Tests against $version, main classes not recompiled; only polylb-dubbo's tests run.
set +e
mvn "${common[@]}" ${MVN_ARGS:-} test "-Ddubbo.version=$version" -Dmaven.main.skip=true \
    '-Dtest=io/polylb/dubbo/*Test' -Dsurefire.failIfNoSpecifiedTests=false > "$work/mvn-test.log" 2>&1
rc=$?
set -e
grep -E 'Tests run:|FAIL|ERROR\]   ' "$work/mvn-test.log" | grep -v '^\[INFO\] Tests run: [0-9]*, Failures: 0, Errors: 0, Skipped: 0, Time' || true
python3 - "$work/polylb-dubbo/target/surefire-reports" "$version" <<'PY' || true
import glob, sys, xml.etree.ElementTree as ET
t = f = e = s = 0
bad = []
for path in sorted(glob.glob(sys.argv[1] + "/TEST-*.xml")):
    r = ET.parse(path).getroot()
    t += int(r.get("tests", 0)); f += int(r.get("failures", 0)); e += int(r.get("errors", 0)); s += int(r.get("skipped", 0))
    for case in r.iter("testcase"):
        for kind in ("failure", "error"):
            for x in case.findall(kind):
                msg = (x.get("message") or x.get("type") or "").splitlines()
                bad.append(f"  {case.get('classname').rsplit('.', 1)[-1]}.{case.get('name')}: {kind}: {(msg[0] if msg else '')[:200]}")
print(f"dubbo {sys.argv[2]}: {t - f - e - s} passed, {f + e} failed, {s} skipped")
print("\n".join(bad))
PY
echo "run-compat.sh: Maven log and reports in $work (mvn-test.log, polylb-dubbo/target/surefire-reports)"
exit $rc
