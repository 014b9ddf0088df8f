# Writes one man page, gzipped, from a program's --help and --version with
# help2man (cmake -P, at build time; tools/packaging/CMakeLists.txt).
#
#   HELP2MAN, GZIP  the tools
#   EXE             the program; SUB, if set, a subcommand (rally-relay agent)
#   PAGE            the page's name (rally-relay, rally-relay-agent)
#   SECTION         1 or 8
#   SOURCE          the footer's source ("rallypoint 0.1.0")
#   OUT             the .gz to write
#
# The NAME line is the --help's summary, the line after the Usage lines
# ("The front of a Quake 3 engine game server." -> "the front of a Quake 3
# engine game server"): the page comes from --help alone. A --help that
# help2man cannot read (no Usage line, no Options section, no summary) fails
# the build instead of giving a page that says nothing.
foreach(v HELP2MAN GZIP EXE PAGE SECTION SOURCE OUT)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "man.cmake: ${v} is not set")
  endif()
endforeach()

get_filename_component(dir "${OUT}" DIRECTORY)
set(prog "${EXE}")
if(SUB)
  # help2man runs a program with --help and --version: a subcommand gets a
  # two-line wrapper.
  set(prog "${dir}/${PAGE}")
  file(WRITE "${prog}" "#!/bin/sh\nexec '${EXE}' ${SUB} \"$@\"\n")
  file(CHMOD "${prog}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
       GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endif()

execute_process(COMMAND "${prog}" --help OUTPUT_VARIABLE help RESULT_VARIABLE rc
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PAGE} --help exited ${rc}: ${err}")
endif()
execute_process(COMMAND "${prog}" --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PAGE} --version exited ${rc}")
endif()
string(REGEX MATCH "[0-9]+\\.[0-9]+(\\.[0-9]+)?" number "${version}")

# The summary: the first line after "Usage:" and its "  or:" lines.
if(NOT help MATCHES "^Usage: ")
  message(FATAL_ERROR "${PAGE} --help: the first line is not 'Usage: ...' (help2man reads it as the SYNOPSIS)")
endif()
string(REGEX REPLACE "^Usage: [^\n]*\n(  or: [^\n]*\n)*" "" after "${help}")
string(REGEX MATCH "^[^\n]*" summary "${after}")
if(NOT summary MATCHES "^[A-Z][^ ]* .*\\.$")
  message(FATAL_ERROR "${PAGE} --help: no one-line summary after the Usage lines (got '${summary}')")
endif()
if(NOT help MATCHES "\nOptions:\n")
  message(FATAL_ERROR "${PAGE} --help: no 'Options:' section")
endif()
string(REGEX REPLACE "\\.$" "" summary "${summary}")
string(SUBSTRING "${summary}" 0 1 first)
string(SUBSTRING "${summary}" 1 -1 rest)
string(TOLOWER "${first}" first)
set(summary "${first}${rest}")

set(args --no-info "--section=${SECTION}" "--name=${summary}" "--source=${SOURCE}")
if(SUB)
  # "rally-relay agent 0.1.0" would name the page rally-relay.
  list(APPEND args "--version-string=${PAGE} ${number}")
endif()
set(page "${dir}/${PAGE}.${SECTION}")
execute_process(COMMAND "${HELP2MAN}" ${args} "--output=${page}" "${prog}"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man ${PAGE}: ${err}")
endif()
file(READ "${page}" text)
foreach(want "\n.SH NAME\n${PAGE} \\- " "\n.SH SYNOPSIS\n" "\n.SH OPTIONS\n")
  string(FIND "${text}" "${want}" at)
  if(at LESS 0)
    message(FATAL_ERROR "help2man ${PAGE}: the page lacks '${want}'")
  endif()
endforeach()
# gzip -9n, as Debian compresses man pages (no name or time stamp inside).
execute_process(COMMAND "${GZIP}" -9nc "${page}" OUTPUT_FILE "${OUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUT}")
  message(FATAL_ERROR "gzip ${page} failed")
endif()
