package record

// oNoFollow: Windows has no O_NOFOLLOW; recordings are resumed only by the gateway, on Linux.
const oNoFollow = 0
