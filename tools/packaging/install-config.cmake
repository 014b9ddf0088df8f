# Installs the files whose text names install paths: the systemd units, their
# environment files, and the sysusers.d and sysctl.d snippets (include()d by
# cmake_install.cmake through install(CODE), see CMakeLists.txt).
#
# It runs at install time because only then is the prefix known for sure:
# `cmake --install build --prefix /opt/rally` and CPack (prefix /usr, the
# files staged under DESTDIR) both choose it after configuration, and a unit
# whose ExecStart names another prefix than the binary's would not start.
#
# Where things go, for the prefix P:
#   P = /usr (a package)   units in RALLY_USR_UNITDIR (/lib/systemd/system
#                          on Debian 12), sysusers.d and sysctl.d under
#                          /usr/lib, environment files in /etc/default
#   P = /opt/NAME          units in P/lib/systemd/system (link or copy them),
#                          environment files in /etc/opt/NAME/default
#   any other P            units in P/lib/systemd/system (systemd reads
#                          /usr/local/lib/systemd/system), sysusers.d and
#                          sysctl.d under P/lib, environment files in
#                          P/etc/default (as GNUInstallDirs puts sysconfdir)
# RALLY_SYSTEMD_UNITDIR, when set, is where the units go whatever P is.
#
# Set by CMakeLists.txt: RALLY_TEMPLATES, RALLY_STAGE, RALLY_BINDIR,
# RALLY_SBINDIR, RALLY_DOCDIR, RALLY_SYSCONFDIR (as configured: relative to
# the prefix unless absolute), RALLY_SYSTEMD_UNITDIR, RALLY_USR_UNITDIR,
# RALLY_USR_SYSUSERSDIR, RALLY_USR_SYSCTLDIR.

set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")

function(rally_full out rel)
  if(IS_ABSOLUTE "${rel}")
    set(${out} "${rel}" PARENT_SCOPE)
  else()
    set(${out} "${prefix}/${rel}" PARENT_SCOPE)
  endif()
endfunction()

rally_full(BINDIR "${RALLY_BINDIR}")
rally_full(SBINDIR "${RALLY_SBINDIR}")
rally_full(DOCDIR "${RALLY_DOCDIR}")
if(prefix STREQUAL "" OR prefix STREQUAL "/usr")
  set(sysconfdir /etc)
  set(unitdir "${RALLY_USR_UNITDIR}")
  set(sysusersdir "${RALLY_USR_SYSUSERSDIR}")
  set(sysctldir "${RALLY_USR_SYSCTLDIR}")
else()
  if(prefix MATCHES "^/opt/(.*)")
    set(sysconfdir "/etc/opt/${CMAKE_MATCH_1}")
  else()
    set(sysconfdir "${prefix}/etc")
  endif()
  set(unitdir "${prefix}/lib/systemd/system")
  set(sysusersdir "${prefix}/lib/sysusers.d")
  set(sysctldir "${prefix}/lib/sysctl.d")
endif()
if(IS_ABSOLUTE "${RALLY_SYSCONFDIR}")
  set(sysconfdir "${RALLY_SYSCONFDIR}")
endif()
if(RALLY_SYSTEMD_UNITDIR)
  set(unitdir "${RALLY_SYSTEMD_UNITDIR}")
endif()
set(SYSCONFDIR "${sysconfdir}")

# configure_file(@ONLY) fills @BINDIR@, @SBINDIR@, @DOCDIR@, @SYSCONFDIR@.
set(stage "${RALLY_STAGE}/install")
file(REMOVE_RECURSE "${stage}")
foreach(unit rally-relay rally-master rally-lobby-relay rally-relay-agent)
  configure_file("${RALLY_TEMPLATES}/${unit}.service.in" "${stage}/unit/${unit}.service" @ONLY)
  configure_file("${RALLY_TEMPLATES}/${unit}.default.in" "${stage}/default/${unit}" @ONLY)
endforeach()
configure_file("${RALLY_TEMPLATES}/rallypoint.sysusers" "${stage}/sysusers/rallypoint.conf" COPYONLY)

file(GLOB units "${stage}/unit/*.service")
file(GLOB defaults "${stage}/default/*")
file(INSTALL DESTINATION "${unitdir}" TYPE FILE FILES ${units})
file(INSTALL DESTINATION "${sysusersdir}" TYPE FILE FILES "${stage}/sysusers/rallypoint.conf")
file(INSTALL DESTINATION "${sysctldir}" TYPE FILE FILES "${RALLY_TEMPLATES}/50-rally-relay.conf")
# The environment files are the operator's once installed: a later install
# (make install over an edited one) leaves them as they are. The package
# lists them as conffiles instead (dpkg asks).
foreach(f IN LISTS defaults)
  get_filename_component(name "${f}" NAME)
  if(EXISTS "$ENV{DESTDIR}${sysconfdir}/default/${name}")
    message(STATUS "Keeping: $ENV{DESTDIR}${sysconfdir}/default/${name} (the operator's)")
  else()
    file(INSTALL DESTINATION "${sysconfdir}/default" TYPE FILE FILES "${f}")
  endif()
endforeach()
