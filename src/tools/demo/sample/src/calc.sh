# Fee calculation of the payments service.
add() {
    echo $(( $1 + $2 ))
}

fee() {
    # 2 % fee, rounded down, at least 1.
    amount=$1
    fee=$(( amount * 2 / 100 ))
    if [ "$fee" -lt 1 ]; then fee=1; fi
    echo "$fee"
}
