# cmake -DOUT=<file.c> -DIN="<a.html;b.js;...>" -DNAMES="<sym;sym;...>" -P embed.cmake
# Writes each input as a byte array (NUL-terminated, length without it), so
# the page's HTML, CSS and JS stay plain files under master/page/.
set(body "/* Generated from master/page/ by master/page/embed.cmake: do not edit. */\n#include <stddef.h>\n\n")
list(LENGTH IN n)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  list(GET IN ${i} f)
  list(GET NAMES ${i} sym)
  file(READ ${f} hex HEX)
  string(LENGTH "${hex}" hexlen)
  math(EXPR len "${hexlen} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n\t" bytes "${bytes}")
  string(APPEND body "extern const unsigned char ${sym}[];\nextern const size_t ${sym}_len;\n")
  string(APPEND body "const unsigned char ${sym}[] = {\n\t${bytes}0x00};\nconst size_t ${sym}_len = ${len};\n\n")
endforeach()
file(WRITE ${OUT} "${body}")
