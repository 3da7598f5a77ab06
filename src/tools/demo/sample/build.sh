#!/bin/sh
# Builds the service into out/.
set -eu
rm -rf out
mkdir -p out
cp src/calc.sh out/calc.sh
cat > out/payments <<'SCRIPT'
#!/bin/sh
. "$(dirname "$0")/calc.sh"
echo "payments-api: fee for ${1:-100} is $(fee "${1:-100}")"
SCRIPT
chmod +x out/payments
echo "built out/payments"
