#!/bin/sh
# As Kafka's own script: the versions of each broker's API, or an error when none answers.
exec java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp '/opt/kafka/libs/*' \
  org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
