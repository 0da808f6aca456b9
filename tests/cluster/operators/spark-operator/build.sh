#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build (once) the real Spark operator from Go modules, and the real spark-submit it runs:
#   github.com/kubeflow/spark-operator/v2/cmd/operator@$SPARK_OPERATOR_VERSION
#     -> $RB_CACHE/bin/spark-operator-$SPARK_OPERATOR_VERSION/spark-operator
#   through the wrapper module module/ (its go.mod copies every replace line of the
#   operator's, which `go install pkg@version` refuses; go.sum pinned here);
#   Spark $SPARK_VERSION's jars (spark-kubernetes + spark-core and their runtime
#   dependencies, spark/pom.xml) from Maven Central
#     -> $RB_CACHE/bin/spark-$SPARK_VERSION/{jars/,bin/spark-submit}   (a SPARK_HOME)
#   with spark/spark-submit as its launcher.
# Last stdout lines: BIN=, SRC= (the module source: charts/spark-operator-chart holds the
# CRDs and the RBAC), VERSION=, SPARK_HOME=.
#
# v2.5.0 is the newest release the module proxy serves (v2.3.0, v2.4.0, v2.5.0; v2.2.0 and
# v2.3.1 answer 403); its go.mod (go 1.24.10) builds with the Go here. Spark 4.0.1 is the
# Spark of that release's own image (Dockerfile ARG SPARK_IMAGE). Bumping the operator:
# edit the version here and in module/go.mod, copy the new replace block, `go mod tidy` in
# module/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"

SPARK_OPERATOR_VERSION=v2.5.0
SPARK_VERSION=4.0.1
MODULE=github.com/kubeflow/spark-operator/v2

bin="$(rb_go_build_cached spark-operator "$SPARK_OPERATOR_VERSION" "$here/module" "$MODULE/cmd/operator")"
src="$(rb_module_dir "$MODULE@$SPARK_OPERATOR_VERSION")"

# spark-submit runs on Java (>= 17 for Spark 4) and its jars are resolved with Maven: the
# machine image has both; where it does not and we are root with apt, install them.
if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    rb_log "installing Java 17 and Maven (Debian packages) for spark-submit"
    rb_lock "$RB_CACHE/.apt.lock"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >&2 \
      || rb_die "apt-get could not install openjdk-17-jdk-headless and maven"
  fi
fi

spark_home="$RB_CACHE/bin/spark-$SPARK_VERSION"
if [[ ! -x "$spark_home/bin/spark-submit" ]]; then
  command -v mvn >/dev/null || rb_die "mvn is not in PATH: install Maven (Maven Central must be reachable)"
  command -v java >/dev/null || rb_die "java is not in PATH: install a JDK >= 17 (Spark $SPARK_VERSION needs it)"
  rb_lock "$RB_CACHE/.build-spark.lock"
  if [[ ! -x "$spark_home/bin/spark-submit" ]]; then
    t0=$SECONDS tmp="$spark_home.tmp.$$"
    rm -rf "$tmp"; mkdir -p "$tmp/bin"
    rb_log "resolving Spark $SPARK_VERSION's jars from Maven Central into $spark_home"
    # (Maven 3.8 writes colour resets even in batch mode: stripped.)
    nice -n 10 mvn -B -q -f "$here/spark/pom.xml" -Dspark.version="$SPARK_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/jars" 2>&1 \
      | sed 's/\x1b\[[0-9;]*m//g' >&2 \
      || { rm -rf "$tmp"; rb_die "resolving Spark $SPARK_VERSION's jars failed; see the mvn output above"; }
    cp "$here/spark/spark-submit" "$tmp/bin/spark-submit"
    SPARK_HOME="$tmp" "$tmp/bin/spark-submit" --version 2>&1 | grep -q "version $SPARK_VERSION" \
      || { rm -rf "$tmp"; rb_die "the resolved spark-submit does not run"; }
    rm -rf "$spark_home"; mv "$tmp" "$spark_home"
    rb_log "Spark $SPARK_VERSION ready in $((SECONDS - t0))s"
  fi
fi

rb_operator_report "$bin" "$src" "$SPARK_OPERATOR_VERSION"
echo "SPARK_HOME=$spark_home"
