# Finds cudnn-frontend, cuDNN's header-only C++ graph API (MIT), as scripts/setup.sh fetches it
# into .deps/cudnn-frontend-<version>/include, or where CUDNN_FRONTEND_ROOT (CMake or environment
# variable) points: a folder holding include/cudnn_frontend.h.
# Defines CudnnFrontend_FOUND, CUDNN_FRONTEND_INCLUDE_DIR, CudnnFrontend_VERSION and the INTERFACE
# target CudnnFrontend::CudnnFrontend (SYSTEM includes: the headers are not warning-clean).
set(_cudnn_frontend_pinned 1.32.0)  # the version scripts/setup.sh fetches
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
          HINTS ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT}
                ${PROJECT_SOURCE_DIR}/.deps/cudnn-frontend-${_cudnn_frontend_pinned}
          PATH_SUFFIXES include)
if(CUDNN_FRONTEND_INCLUDE_DIR AND EXISTS "${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h")
  file(READ "${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h" _fe_version_h)
  string(REGEX MATCH "define CUDNN_FRONTEND_MAJOR_VERSION ([0-9]+)" _ "${_fe_version_h}")
  set(_major ${CMAKE_MATCH_1})
  string(REGEX MATCH "define CUDNN_FRONTEND_MINOR_VERSION ([0-9]+)" _ "${_fe_version_h}")
  set(_minor ${CMAKE_MATCH_1})
  string(REGEX MATCH "define CUDNN_FRONTEND_PATCH_VERSION ([0-9]+)" _ "${_fe_version_h}")
  set(CudnnFrontend_VERSION "${_major}.${_minor}.${CMAKE_MATCH_1}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CudnnFrontend
    REQUIRED_VARS CUDNN_FRONTEND_INCLUDE_DIR
    VERSION_VAR CudnnFrontend_VERSION
    REASON_FAILURE_MESSAGE "run scripts/setup.sh (it fetches cudnn-frontend ${_cudnn_frontend_pinned} into .deps/), or set CUDNN_FRONTEND_ROOT to a folder with include/cudnn_frontend.h")
if(CudnnFrontend_FOUND AND NOT TARGET CudnnFrontend::CudnnFrontend)
  add_library(CudnnFrontend::CudnnFrontend INTERFACE IMPORTED)
  set_target_properties(CudnnFrontend::CudnnFrontend PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_FRONTEND_INCLUDE_DIR}"
      # The bundled JSON library only serialises graphs, which nothing here does; without it the
      # one file that includes the frontend compiles faster.
      INTERFACE_COMPILE_DEFINITIONS CUDNN_FRONTEND_SKIP_JSON_LIB)
endif()
mark_as_advanced(CUDNN_FRONTEND_INCLUDE_DIR)
