// Not compiled: an nn/ file that calls cuda:: directly instead of going through the
// device's table, for the CTest test that checks tools/check_layers.cmake refuses a
// cuda:: name outside cuda/ and the device registrations. (This comment's cuda::
// and the string's below are not code and are not reported.)
const char* where = "cuda::nowhere";
int planted_devices() {
  return ember::cuda::device_count();
}
