#!/usr/bin/env bash
# walserver's options: --help lists every flag with its default; a config file, WALSERVER_*
# environment variables and the command line apply in that rising order; bad input exits 2 with
# a message naming the problem.
source "$(dirname "$0")/lib.sh"
flags_cc=${FLAGS_CC:?path of server/flags.cc}

help=$("$WALSERVER" --help)
for flag in $(sed -n 's/^ABSL_FLAG([^,]*, *\([a-z_]*\),.*/\1/p' "$flags_cc"); do
  expect_contains "$help" "--$flag " "--help entry of --$flag"
done
[[ $(grep -c "default:" <<<"$help") -ge $(grep -c "^ABSL_FLAG" "$flags_cc") ]] ||
  fail "--help must show a default for every option"

# --version names walserver's and the running librdkafka's versions.
version=$("$WALSERVER" --version)
[[ "$version" == "walserver $expected_version (librdkafka $expected_librdkafka)" ]] ||
  fail "--version printed '$version'"

# Bad input: exit code 2 and a message that names it.
expect_exit 2 "$WALSERVER" --no_such_option=1
expect_contains "$(cat "$work/err")" "unknown setting 'no_such_option'"
expect_exit 2 "$WALSERVER" --topic_count=many
expect_contains "$(cat "$work/err")" "topic_count"
expect_exit 2 "$WALSERVER" --config="$work/missing.conf"
expect_contains "$(cat "$work/err")" "cannot read config file"
printf 'listen = 127.0.0.1:0\nthis line is wrong\n' >"$work/bad.conf"
expect_exit 2 "$WALSERVER" --config="$work/bad.conf"
expect_contains "$(cat "$work/err")" "bad.conf:2"
expect_exit 2 env WALSERVER_TOPIC_COUNTT=3 "$WALSERVER"
expect_contains "$(cat "$work/err")" "WALSERVER_TOPIC_COUNTT"
expect_exit 2 "$WALSERVER" --log_format=xml
expect_exit 2 "$WALSERVER" --topic_count=0 --http_listen=
expect_contains "$(cat "$work/err")" "topic_count and partitions_per_topic must be at least 1"
expect_exit 2 "$WALSERVER" --prune_mode=sometimes --http_listen=
expect_contains "$(cat "$work/err")" "--prune_mode=sometimes is not a mode: auto"
expect_exit 2 "$WALSERVER" --compression=brotli --http_listen=
expect_contains "$(cat "$work/err")" "--compression=brotli is not a codec: none, lz4"

# Precedence: file < environment < command line. The file asks for prefix "fromfile" and JSON
# logs; the environment overrides the prefix; a second run overrides it again on the command line.
cat >"$work/good.conf" <<CONF
# walserver test config
topic_prefix = fromfile
log_format = json
kafka.client.rack = rack-a
CONF
WALSERVER_TOPIC_PREFIX=fromenv start_walserver envrun --config="$work/good.conf"
"$WALCTL" --server="$ADDR" create 1 >/dev/null
expect_contains "$("$WALCTL" --server="$ADDR" info 1)" "^topic: +fromenv_"
head -n 1 "$work/envrun.log" | python3 -c 'import json,sys; json.loads(sys.stdin.readline())' ||
  fail "log_format=json from the file must give JSON lines"
WALSERVER_TOPIC_PREFIX=fromenv start_walserver cliarg --config="$work/good.conf" --topic_prefix=fromcli
"$WALCTL" --server="$ADDR" create 1 >/dev/null
expect_contains "$("$WALCTL" --server="$ADDR" info 1)" "^topic: +fromcli_"
# A kafka.<property> reaches librdkafka: an invalid one stops start-up.
expect_exit 2 "$WALSERVER" --kafka.no.such.property=1 --http_listen= --listen=127.0.0.1:0
expect_contains "$(cat "$work/out" "$work/err")" "no.such.property"
echo "config_test: all checks passed"
