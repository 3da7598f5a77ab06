#!/bin/sh
# Unit tests of src/calc.sh; writes JUnit XML to TestResults/unit.xml.
set -u
. ./src/calc.sh
mkdir -p TestResults
cases=""
failures=0
total=0
check() {
    name=$1 expected=$2 actual=$3
    total=$((total + 1))
    if [ "$expected" = "$actual" ]; then
        cases="$cases<testcase classname=\"calc\" name=\"$name\" time=\"0.001\"/>"
        echo "PASS $name"
    else
        failures=$((failures + 1))
        cases="$cases<testcase classname=\"calc\" name=\"$name\" time=\"0.001\"><failure message=\"expected $expected, got $actual\">expected $expected, got $actual</failure></testcase>"
        echo "FAIL $name: expected $expected, got $actual"
    fi
}
check "add_two_and_three" 5 "$(add 2 3)"
check "fee_of_1000_is_20" 20 "$(fee 1000)"
check "fee_is_at_least_one" 1 "$(fee 10)"
cat > TestResults/unit.xml <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="$total" failures="$failures"><testsuite name="calc" tests="$total" failures="$failures" errors="0" skipped="0">$cases</testsuite></testsuites>
XML
[ "$failures" -eq 0 ]
