# Doxygen input filter for ember's headers, whose comments are plain // comments
# (the house style): the opening comment block of a file becomes its @file
# description, every other whole-line // comment a /// comment that documents the
# declaration below it. Characters Doxygen would read as commands or HTML are
# escaped, so the prose comes out as written.
function escape(s) {
  gsub(/\\/, "\\\\", s)
  gsub(/@/, "\\@", s)
  gsub(/</, "\\<", s)
  gsub(/>/, "\\>", s)
  gsub(/#/, "\\#", s)
  gsub(/&/, "\\\\\\&", s)
  gsub(/\$/, "\\$", s)
  gsub(/%/, "\\%", s)
  gsub(/\/\*/, "/\\*", s)
  gsub(/\*\//, "*\\/", s)
  return s
}
BEGIN { head = 1 }
{
  line = $0
  if (head) {
    if (line ~ /^\/\//) {
      text = line
      sub(/^\/\/ ?/, "", text)
      if (!opened) { print "/// @file"; opened = 1 }
      print "/// " escape(text)
      next
    }
    head = 0
  }
  if (line ~ /^[ \t]*\/\/($|[^\/])/) {
    match(line, /^[ \t]*/)
    indent = substr(line, 1, RLENGTH)
    text = substr(line, RLENGTH + 1)
    sub(/^\/\/ ?/, "", text)
    print indent "/// " escape(text)
    next
  }
  print line
}
