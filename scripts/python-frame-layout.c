/* Prints the offsets of CPython's internal frame structures for the
 * interpreter whose headers it is compiled against: the numbers of
 * recorder-ffi/src/python/layout.rs, which reads a thread's Python frames
 * without the GIL.
 *
 *   for v in 3.10 3.11 3.12 3.13; do
 *     inc=$(python$v -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
 *     gcc -I"$inc" scripts/python-frame-layout.c -o /tmp/layout && /tmp/layout
 *   done
 *
 * (Internal headers need Py_BUILD_CORE; a default, non-debug 64-bit build.)
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#include "internal/pycore_pystate.h"
#if PY_VERSION_HEX < 0x030B0000
#include "frameobject.h"
#endif
#include "internal/pycore_code.h"
int main(void) {
  printf("version %d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
#if PY_VERSION_HEX >= 0x030D0000
  printf("tstate_current_frame %zu\n", offsetof(PyThreadState, current_frame));
  printf("frame_code %zu\n", offsetof(struct _PyInterpreterFrame, f_executable));
  printf("frame_previous %zu\n", offsetof(struct _PyInterpreterFrame, previous));
  printf("frame_instr %zu\n", offsetof(struct _PyInterpreterFrame, instr_ptr));
  printf("frame_owner %zu\n", offsetof(struct _PyInterpreterFrame, owner));
#elif PY_VERSION_HEX >= 0x030B0000
  printf("tstate_cframe %zu\n", offsetof(PyThreadState, cframe));
  printf("cframe_current_frame %zu\n", offsetof(_PyCFrame, current_frame));
  printf("frame_code %zu\n", offsetof(struct _PyInterpreterFrame, f_code));
  printf("frame_previous %zu\n", offsetof(struct _PyInterpreterFrame, previous));
  printf("frame_instr %zu\n", offsetof(struct _PyInterpreterFrame, prev_instr));
  printf("frame_owner %zu\n", offsetof(struct _PyInterpreterFrame, owner));
#else
  printf("tstate_frame %zu\n", offsetof(PyThreadState, frame));
  printf("frame_back %zu\n", offsetof(PyFrameObject, f_back));
  printf("frame_code %zu\n", offsetof(PyFrameObject, f_code));
  printf("frame_lasti %zu\n", offsetof(PyFrameObject, f_lasti));
#endif
  printf("code_name %zu\n", offsetof(PyCodeObject, co_name));
  printf("code_filename %zu\n", offsetof(PyCodeObject, co_filename));
  printf("code_firstlineno %zu\n", offsetof(PyCodeObject, co_firstlineno));
  printf("code_linetable %zu\n", offsetof(PyCodeObject, co_linetable));
#if PY_VERSION_HEX >= 0x030B0000
  printf("code_adaptive %zu\n", offsetof(PyCodeObject, co_code_adaptive));
  printf("code_qualname %zu\n", offsetof(PyCodeObject, co_qualname));
#endif
  printf("ascii_size %zu compact_size %zu state %zu\n", sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject), offsetof(PyASCIIObject, state));
  printf("unicode_length %zu\n", offsetof(PyASCIIObject, length));
#if PY_VERSION_HEX >= 0x030C0000
  printf("FRAME_OWNED_BY_CSTACK %d\n", FRAME_OWNED_BY_CSTACK);
#endif
  return 0;
}
