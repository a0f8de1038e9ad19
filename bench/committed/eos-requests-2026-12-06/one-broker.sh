#!/bin/bash
set -e
export PATH=$(cat /tmp/n24):$PATH
export KAFKA_BROKERS=$(cat /tmp/kb.txt)
out=/work/eosreq
R=bench/committed/eos-requests-2026-12-06/run.mts
for round in 1 2; do
  for rate in 500 1000; do
    (cd /work/main && node_modules/.bin/tsx $R $rate 60 $out eos S$round)
    (cd /work/pipelined && node_modules/.bin/tsx $R $rate 60 $out eos P$round)
  done
done
for rate in 500 1000; do (cd /work/main && node_modules/.bin/tsx $R $rate 60 $out alo S1); done
echo ALLDONE
