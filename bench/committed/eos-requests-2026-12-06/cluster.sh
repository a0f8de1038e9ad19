#!/bin/bash
set -e
while ! grep -q ALLDONE2 /work/eosreq/log2.txt; do sleep 5; done
export PATH=$(cat /tmp/n24):$PATH
cd /work/main
node_modules/.bin/tsx scripts/localKafka.ts stop --dir /work/kafka-shared || true
OUTBOX_KAFKA_JIT=quick node_modules/.bin/tsx scripts/localKafka.ts start --nodes 3 --dir /work/kafka-cluster > /tmp/kc.txt
export KAFKA_BROKERS=$(cat /tmp/kc.txt)
echo "cluster $KAFKA_BROKERS"
out=/work/eosreq/cluster
mkdir -p $out
R=bench/committed/eos-requests-2026-12-06/run.mts
# warm the cluster up (the first run after a start was the slowest in e66aba9's runs)
(cd /work/main && node_modules/.bin/tsx $R 500 20 $out/warm eos W)
for round in 1 2; do
  for rate in 500 1000; do
    (cd /work/main && node_modules/.bin/tsx $R $rate 60 $out eos,alo C$round)
    (cd /work/alternate && OUTBOX_EXPERIMENT_NO_PIPELINE=1 node_modules/.bin/tsx $R $rate 60 $out eos CA$round)
    (cd /work/main && node_modules/.bin/tsx $R $rate 60 $out refacks,reftx CR$round)
  done
done
echo ALLDONE3
