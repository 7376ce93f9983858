# Sourced by the tool tests. check_csv FILE "TESTS" ROWS [ABI]: prints one line per problem in a
# --csv file from a sweep of 8 B to 32 KiB (-f 8, -n 20, -c): every test in TESTS for the plugin and
# raw at every size, ROWS rows in all, sane figures, plugin rows with a ratio to raw (and ABI when
# given), raw rows without. Prints nothing when the file is right.
check_csv() {
  awk -F, -v tests="$2" -v want_rows="$3" -v abi="${4:-}" 'NR > 1 {
      rows++; seen[$1 "/" $2 "/" $3] = 1
      if ($4 != 20 || !($8 > 0) || !($9 > 0) || $10 == "" || $11 == "" || $18 != 1) print "row " NR ": " $0
      if ($2 == "plugin" && (!($14 > 0) || $15 != "fabric" || (abi != "" && $16 != abi))) print "plugin row " NR ": " $0
      if ($2 == "raw" && ($14 != "" || $15 != "")) print "raw row " NR ": " $0
    }
    END {
      if (rows != want_rows) print "rows: " rows ", expected " want_rows
      split(tests, t, " "); split("plugin raw", m, " "); split("8 64 512 4096 32768", s, " ")
      for (i in t) for (j in m) for (k in s)
        if (!((t[i] "/" m[j] "/" s[k]) in seen)) print "missing " t[i] "/" m[j] "/" s[k]
    }' "$1"
}
