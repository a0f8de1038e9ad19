#!/bin/bash
set -e
while ! grep -q ALLDONE /work/eosreq/log.txt; do sleep 5; done
export PATH=$(cat /tmp/n24):$PATH
export KAFKA_BROKERS=$(cat /tmp/kb.txt)
out=/work/eosreq
R=bench/committed/eos-requests-2026-12-06/run.mts
for round in 1 2; do
  for rate in 500 1000; do
    (cd /work/alternate && OUTBOX_EXPERIMENT_NO_PIPELINE=1 node_modules/.bin/tsx $R $rate 60 $out eos A$round)
    (cd /work/main && node_modules/.bin/tsx $R $rate 60 $out eos S$((round+2)))
  done
done
echo ALLDONE2
