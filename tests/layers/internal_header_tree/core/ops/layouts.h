// Internal to core/ops: a planted internal header (not compiled).
#pragma once
