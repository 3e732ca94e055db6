# Reads a compute-sanitizer racecheck log (--racecheck-report analysis) and prints
# one line per race report: kernel, severity, hazards, the report's text.
#   awk -v pattern='nvjet_[A-Za-z0-9_]+' -f tools/racecheck_reports.awk LOG
# A report is a line "========= Error: Race reported between ..." (or Warning:)
# and its continuation "=========     and ... [N hazards]". Shared-memory hazards
# are between threads of one block, so both accesses are in one kernel: the
# kernel is the first match of `pattern` in the report ("other" when none
# matches; then the text says where). Used by tools/gpu_sanitize.sh and
# tools/cublaslt_racecheck_probe.sh.
function flush() {
  if (text == "") return
  kernel = "other"
  if (match(text, pattern)) kernel = substr(text, RSTART, RLENGTH)
  hazards = 1
  if (match(text, /\[[0-9]+ hazards?\]/)) hazards = substr(text, RSTART + 1, RLENGTH - 2) + 0
  gsub(/=========/, "", text)
  gsub(/[ \t]+/, " ", text)
  printf "%s\t%s\t%d\t%s\n", kernel, severity, hazards, substr(text, 1, 400)
  text = ""
}
/^========= (Error|Warning): Race reported/ {
  flush()
  severity = ($0 ~ /Error:/) ? "error" : "warning"
  text = $0
  next
}
text != "" && /^=========[ \t]+and / { text = text " " $0; flush(); next }
{ flush() }
END { flush() }
