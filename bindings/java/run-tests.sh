#!/usr/bin/env bash
# Java binding tests: builds the JNI crate, then runs every Maven test (Java API end to end, the
# gRPC-java policy against real loopback servers,
# parity with Apache Dubbo's own load balancers, a real Dubbo consumer and providers over
# loopback), with -Xcheck:jni. Everything comes from Maven Central; no local repository override.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

command -v mvn >/dev/null || { echo "run-tests.sh: mvn (Maven 3.8+) is required" >&2; exit 1; }
command -v java >/dev/null || { echo "run-tests.sh: java (17+) is required" >&2; exit 1; }

target_dir="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --release -p polylb-jni)

cd "$here"
# Maven would run the same cargo build again; it is already done.
mvn -B -q verify -Dpolylb.cargo.skip=true "-Dpolylb.cargo.target.dir=$target_dir"

# Surefire's closing lines are quiet under -q; summarise for CI logs.
python3 - "$here" <<'PY' || true
import glob, sys, xml.etree.ElementTree as ET
t = f = e = s = 0
for path in glob.glob(sys.argv[1] + "/*/target/surefire-reports/TEST-*.xml"):
    r = ET.parse(path).getroot()
    t += int(r.get("tests", 0)); f += int(r.get("failures", 0)); e += int(r.get("errors", 0)); s += int(r.get("skipped", 0))
print(f"java: {t - f - e - s} passed, {f + e} failed, {s} skipped")
PY
