# Writes OUTPUT from INPUT with the tool's version and the current git commit, touching OUTPUT only
# when its text changes: run at every build, so provenance names the commit that was built.
execute_process(COMMAND git rev-parse --short=12 HEAD
                WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE VRAMBENCH_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET)
if(NOT VRAMBENCH_GIT_COMMIT)
  set(VRAMBENCH_GIT_COMMIT unknown)
endif()
execute_process(COMMAND git status --porcelain --untracked-files=no
                WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE _dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(_dirty)
  string(APPEND VRAMBENCH_GIT_COMMIT "-dirty")
endif()
configure_file(${INPUT} ${OUTPUT}.tmp @ONLY)
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
