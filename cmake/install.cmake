# install.cmake: what `cmake --install` puts under the prefix: the header(s),
# libkiln.a, libkiln.so.MAJOR, the pkg-config modules kiln (shared) and
# kiln-static, and the CMake package kiln (kiln::kiln, kiln::kiln_static).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS kiln kiln_shared EXPORT kilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

set(kiln_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${kiln_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${kiln_cmake_dir})
# Before 1.0 a minor release may change the API: 0.9.x accepts a request for 0.9.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${kiln_cmake_dir})

# The .pc files locate the prefix from their own directory (${pcfiledir}),
# so `cmake --install build --prefix DIR` gives correct ones for any DIR.
file(RELATIVE_PATH KILN_PC_INCLUDEDIR /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p/${CMAKE_INSTALL_INCLUDEDIR})
foreach(pc kiln kiln-static)
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
