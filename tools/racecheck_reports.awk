# Reads a compute-sanitizer racecheck log (--racecheck-report analysis) and prints
# one line per race report: kernel, severity, hazards, the report's text.
#   awk -v pattern='nvjet_[A-Za-z0-9_]+' -f tools/racecheck_reports.awk LOG
# A report starts at a line "========= Error: Race reported between ..." (or
# Warning:, WARN:) and goes on over the indented lines after it ("=========     and
# Read access at ... [N hazards]"; recent versions put each location and the count
# on lines of their own). Shared-memory hazards are between threads of one block,
# so every access of a report is in one kernel: the kernel is the first match of
# `pattern` in the report ("other" when none matches; the text then says where),
# and its hazards are the sum of its "[N hazards]". Used by tools/gpu_sanitize.sh
# and tools/cublaslt_racecheck_probe.sh.
function flush() {
  if (text == "") return
  kernel = "other"
  if (match(text, pattern)) kernel = substr(text, RSTART, RLENGTH)
  hazards = 0
  rest = text
  while (match(rest, /\[[0-9]+ hazards?\]/)) {
    hazards += substr(rest, RSTART + 1, RLENGTH - 2) + 0
    rest = substr(rest, RSTART + RLENGTH)
  }
  if (hazards == 0) hazards = 1
  gsub(/=========/, "", text)
  gsub(/[ \t]+/, " ", text)
  printf "%s\t%s\t%d\t%s\n", kernel, severity, hazards, substr(text, 1, 400)
  text = ""
}
/^========= [A-Za-z]+: Race reported between/ {
  flush()
  severity = ($0 ~ /^========= [Ee][Rr][Rr][Oo][Rr]/) ? "error" : "warning"
  text = $0
  next
}
text != "" && /^=========[ \t][ \t]+[^ \t]/ { text = text " " $0; next }
{ flush() }
END { flush() }
