# The .deb (cpack -G DEB in the build directory, or the package target).
#
# It holds what `cmake --install --prefix /usr` installs, staged under
# DESTDIR (so /etc/default and /lib/systemd/system land in the package, not
# on this machine), the binaries stripped, the library dependencies computed
# by dpkg-shlibdeps from the binaries themselves, and the maintainer scripts
# of debian/ (system users, the relay's token, systemd's state; nothing is
# started or enabled).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rallypoint)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR rallypoint)
set(CPACK_PACKAGE_CONTACT "${RALLY_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "game-networking suite: game server relay, list server and lobby")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "rallypoint is for communities that host their own games.

rally-relay fronts a Quake 3 engine server (Enemy Territory, ET: Legacy,
ioquake3, OpenArena) that lives at home or behind a tunnel: it owns the
public port, proxies every client, heartbeats the masters on the server's
behalf, filters and rate-limits queries, bans, and has a control API with
Prometheus metrics. rally-relay agent is the home side of its tunnel.

rally-master is a list and rendezvous server: the netpunch master HTTP
API, the Quake 3 / Enemy Territory master protocol and the Fugitive3D
server repository over one registry.

rally-lobby runs beside the game (join codes, NAT traversal, a sealed
lobby session, the game's frames, save sharing) and, on a server, as an
always-on dedicated relay lobby.

systemd units are installed for the relay, the agent, the master and the
dedicated relay lobby, none of them enabled.")
set(CPACK_DEBIAN_PACKAGE_RELEASE ${RALLY_DEB_RELEASE})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Library dependencies from the binaries (dpkg-shlibdeps, dpkg-dev); the
# maintainer scripts' own: systemd-sysusers (systemd, or the standalone
# one), deb-systemd-helper and deb-systemd-invoke (init-system-helpers).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "systemd | systemd-standalone-sysusers, init-system-helpers (>= 1.54~)")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nginx, prometheus")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# conffiles: what `dpkg -i` of a newer version asks about when the operator
# edited it, what remove keeps and purge deletes.
set(conffiles ${CMAKE_CURRENT_BINARY_DIR}/debian/conffiles)
file(WRITE ${conffiles} "")
foreach(unit rally-relay rally-master rally-lobby-relay rally-relay-agent)
  file(APPEND ${conffiles} "/etc/default/${unit}\n")
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_SOURCE_DIR}/debian/postinst
    ${CMAKE_CURRENT_SOURCE_DIR}/debian/prerm
    ${CMAKE_CURRENT_SOURCE_DIR}/debian/postrm
    ${conffiles})
# Installed with the prefix /usr into a staging DESTDIR: tools/packaging's
# install script then writes /usr/sbin into ExecStart=, /etc/default into
# EnvironmentFile= and the units to /lib/systemd/system, whatever prefix
# the build directory was configured with.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/out/" "__pycache__")
include(CPack)
