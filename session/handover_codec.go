package session

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// HandoverVersion is the version of the state an upgrade in place hands to the next image (the
// header's version field). A change to the meaning of a field of HandoverState, or to the
// header, must bump it; fields added or removed need not (gob matches fields by name and skips
// the ones it does not know), but the new image must then treat the missing ones as absent.
const HandoverVersion = 1

// The state travels as one header followed by a gob payload:
//
//	offset  size  field
//	0       8     magic "MXTHOVR\n"
//	8       4     version, big-endian uint32
//	12      4     CRC-32C (Castagnoli) of the payload, big-endian
//	16      8     payload length in bytes, big-endian uint64
//	24      n     payload (encoding/gob)
//
// gob rather than JSON: the rings are the bulk of the state (up to --scrollback per session,
// binary), which JSON would carry as base64 (a third larger, and slower to encode on the
// critical path of the upgrade); gob carries them as they are, and it is self-describing by
// field name, so a build that added a field can still read a state without it. Both ends are
// this program, so a Go-only format costs nothing.
const (
	handoverMagic     = "MXTHOVR\n"
	handoverHeaderLen = 24
	// maxHandoverLen bounds the payload a reader accepts (a corrupt length must not make it
	// allocate without bound): 64 GiB, far above sessions × the 1 GiB --scrollback cap in use.
	maxHandoverLen = 64 << 30
)

// Errors of DecodeHandover, matchable with errors.Is.
var (
	ErrHandoverFormat  = errors.New("not a handover state")
	ErrHandoverVersion = errors.New("unsupported handover state version")
	ErrHandoverLength  = errors.New("handover state length mismatch")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeHandover writes the header for version and payload (any gob-encodable value) to w.
func EncodeHandover(w io.Writer, version uint32, payload any) error {
	var body bytes.Buffer
	if err := gob.NewEncoder(&body).Encode(payload); err != nil {
		return fmt.Errorf("encode handover state: %w", err)
	}
	hdr := make([]byte, handoverHeaderLen)
	copy(hdr, handoverMagic)
	binary.BigEndian.PutUint32(hdr[8:], version)
	binary.BigEndian.PutUint32(hdr[12:], crc32.Checksum(body.Bytes(), castagnoli))
	binary.BigEndian.PutUint64(hdr[16:], uint64(body.Len()))
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("write handover header: %w", err)
	}
	if _, err := w.Write(body.Bytes()); err != nil {
		return fmt.Errorf("write handover state: %w", err)
	}
	return nil
}

// HandoverHeaderVersion returns the version in data's header, checking only the magic.
func HandoverHeaderVersion(data []byte) (uint32, error) {
	if len(data) < handoverHeaderLen || string(data[:8]) != handoverMagic {
		return 0, fmt.Errorf("%w: bad magic or short header (%d bytes)", ErrHandoverFormat, len(data))
	}
	return binary.BigEndian.Uint32(data[8:]), nil
}

// DecodeHandover checks data's header (magic, version == want, payload length equal to what
// follows it, checksum) and decodes its payload into out.
func DecodeHandover(data []byte, want uint32, out any) error {
	v, err := HandoverHeaderVersion(data)
	if err != nil {
		return err
	}
	if v != want {
		return fmt.Errorf("%w: %d (this build reads %d)", ErrHandoverVersion, v, want)
	}
	n := binary.BigEndian.Uint64(data[16:])
	if n > maxHandoverLen || n != uint64(len(data)-handoverHeaderLen) {
		return fmt.Errorf("%w: header says %d bytes, %d follow", ErrHandoverLength, n, len(data)-handoverHeaderLen)
	}
	body := data[handoverHeaderLen:]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[12:]) {
		return fmt.Errorf("%w: checksum mismatch", ErrHandoverFormat)
	}
	if err := gob.NewDecoder(bytes.NewReader(body)).Decode(out); err != nil {
		return fmt.Errorf("%w: decode: %w", ErrHandoverFormat, err)
	}
	return nil
}

// WriteHandoverMemfd encodes payload into a new sealed memfd (close-on-exec, like every fd of
// ours until the exec clears it) and returns its descriptor.
func WriteHandoverMemfd(version uint32, payload any) (int, error) {
	fd, err := unix.MemfdCreate("muxterm-handover", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "muxterm-handover")
	if err := EncodeHandover(f, version, payload); err != nil {
		f.Close()
		return -1, err
	}
	// Sealed: nothing can change the state between this image and the next.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return -1, fmt.Errorf("seal handover memfd: %w", err)
	}
	// Hand the bare descriptor on: the *os.File must not close it when collected.
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return -1, fmt.Errorf("dup handover memfd: %w", err)
	}
	return nfd, nil
}

// ReadHandoverFD reads the whole state from fd (a memfd handed over by the previous image) and
// closes fd.
func ReadHandoverFD(fd int) ([]byte, error) {
	f := os.NewFile(uintptr(fd), "muxterm-handover")
	if f == nil {
		return nil, fmt.Errorf("handover fd %d: invalid", fd)
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("handover fd %d: seek: %w", fd, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("handover fd %d: read: %w", fd, err)
	}
	return data, nil
}
