# CMake package config of the bufferext C headers (header-only).
#
#   find_package(bufferext CONFIG REQUIRED)
#   target_link_libraries(my_ext PRIVATE bufferext::headers)
#
# with -Dbufferext_DIR=$(python -m bufferext --cmakedir) (scikit-build-core
# passes nothing itself: set it, or CMAKE_PREFIX_PATH, from the build's
# Python).  Paths are relative to this file: it works from any install.
# The target carries only the include directory; Python's headers come from
# find_package(Python ... Development.Module).

get_filename_component(_bufferext_root "${CMAKE_CURRENT_LIST_DIR}/../../.."
                       ABSOLUTE)
set(bufferext_INCLUDE_DIR "${_bufferext_root}/include")
set(bufferext_INCLUDE_DIRS "${bufferext_INCLUDE_DIR}")
unset(_bufferext_root)

if(NOT EXISTS "${bufferext_INCLUDE_DIR}/bufferext.h")
  set(bufferext_FOUND FALSE)
  set(bufferext_NOT_FOUND_MESSAGE
      "bufferext.h is not in ${bufferext_INCLUDE_DIR}: a broken install?")
  return()
endif()

if(NOT TARGET bufferext::headers)
  add_library(bufferext::headers INTERFACE IMPORTED)
  set_target_properties(bufferext::headers PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${bufferext_INCLUDE_DIR}")
endif()
