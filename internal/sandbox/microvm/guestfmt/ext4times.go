package guestfmt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// ext4 on-disk layout, as far as normalizeTimes needs it (the kernel's
// Documentation/filesystems/ext4/ describes it).
const (
	sbOffset          = 1024
	sbInodesCount     = 0x00
	sbBlocksCountLo   = 0x04
	sbFirstDataBlock  = 0x14
	sbLogBlockSize    = 0x18
	sbBlocksPerGroup  = 0x20
	sbInodesPerGroup  = 0x28
	sbMagic           = 0x38
	sbInodeSize       = 0x58
	sbFeatureIncompat = 0x60
	sbFeatureRoCompat = 0x64
	sbBlocksCountHi   = 0x150
	sbDescSize        = 0xFE

	ext4Magic          = 0xEF53
	incompat64Bit      = 0x80
	roCompatMetaCsum   = 0x400
	roCompatGdtCsum    = 0x10
	bgInodeTableLo     = 0x08
	bgFlags            = 0x12
	bgItableUnusedLo   = 0x1C
	bgInodeTableHi     = 0x28
	bgFlagInodeUninit  = 0x1
	inodeMode          = 0x00
	inodeAtime         = 0x08
	inodeCtime         = 0x0C
	inodeMtime         = 0x10
	inodeExtraIsize    = 0x80
	inodeCtimeExtra    = 0x84
	inodeMtimeExtra    = 0x88
	inodeAtimeExtra    = 0x8C
	inodeCrtime        = 0x90
	inodeCrtimeExtra   = 0x94
	inodeGoodOldSize   = 128
	minDescSize        = 32
	maxInodeTableBytes = 64 << 20
)

// normalizeTimes sets every in-use inode's access, change and creation
// times to its modification time in the ext4 image at path, which must
// have no metadata checksums. mkfs.ext4 -d copies a file's times from the
// source tree, and the change time (which no program can set) is when
// that tree was unpacked on this host: with it equal to the modification
// time, the same tree makes the same image on every host.
func normalizeTimes(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, sbOffset); err != nil {
		return fmt.Errorf("ext4 superblock: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[sbMagic:]) != ext4Magic {
		return errors.New("ext4 superblock: bad magic")
	}
	if le.Uint32(sb[sbFeatureRoCompat:])&roCompatMetaCsum != 0 {
		return errors.New("ext4 image has metadata checksums: normalizing its times would break them")
	}
	blockSize := int64(1024) << le.Uint32(sb[sbLogBlockSize:])
	inodeSize := int64(le.Uint16(sb[sbInodeSize:]))
	if inodeSize < inodeGoodOldSize {
		inodeSize = inodeGoodOldSize
	}
	perGroup := int64(le.Uint32(sb[sbInodesPerGroup:]))
	blocksPerGroup := int64(le.Uint32(sb[sbBlocksPerGroup:]))
	blocks := int64(le.Uint32(sb[sbBlocksCountLo:]))
	descSize := int64(minDescSize)
	is64 := le.Uint32(sb[sbFeatureIncompat:])&incompat64Bit != 0
	if is64 {
		blocks |= int64(le.Uint32(sb[sbBlocksCountHi:])) << 32
		if d := int64(le.Uint16(sb[sbDescSize:])); d >= minDescSize {
			descSize = d
		}
	}
	if blocksPerGroup == 0 || perGroup == 0 || perGroup*inodeSize > maxInodeTableBytes {
		return errors.New("ext4 superblock: implausible geometry")
	}
	first := int64(le.Uint32(sb[sbFirstDataBlock:]))
	groups := (blocks - first + blocksPerGroup - 1) / blocksPerGroup
	gdt := make([]byte, groups*descSize)
	if _, err := f.ReadAt(gdt, (first+1)*blockSize); err != nil {
		return fmt.Errorf("ext4 group descriptors: %w", err)
	}
	gdtCsum := le.Uint32(sb[sbFeatureRoCompat:])&roCompatGdtCsum != 0
	table := make([]byte, perGroup*inodeSize)
	for g := int64(0); g < groups; g++ {
		d := gdt[g*descSize : (g+1)*descSize]
		used := perGroup
		if gdtCsum {
			if le.Uint16(d[bgFlags:])&bgFlagInodeUninit != 0 {
				continue
			}
			used -= int64(le.Uint16(d[bgItableUnusedLo:]))
		}
		if used <= 0 {
			continue
		}
		at := int64(le.Uint32(d[bgInodeTableLo:]))
		if is64 && descSize > bgInodeTableHi {
			at |= int64(le.Uint32(d[bgInodeTableHi:])) << 32
		}
		t := table[:used*inodeSize]
		if _, err := f.ReadAt(t, at*blockSize); err != nil {
			return fmt.Errorf("ext4 inode table of group %d: %w", g, err)
		}
		for i := int64(0); i < used; i++ {
			normalizeInode(t[i*inodeSize:(i+1)*inodeSize], inodeSize)
		}
		if _, err := f.WriteAt(t, at*blockSize); err != nil {
			return fmt.Errorf("ext4 inode table of group %d: %w", g, err)
		}
	}
	return f.Sync()
}

// normalizeInode sets an in-use inode's times to its modification time.
func normalizeInode(ino []byte, size int64) {
	le := binary.LittleEndian
	if le.Uint16(ino[inodeMode:]) == 0 {
		return
	}
	mtime := le.Uint32(ino[inodeMtime:])
	le.PutUint32(ino[inodeAtime:], mtime)
	le.PutUint32(ino[inodeCtime:], mtime)
	if size <= inodeGoodOldSize {
		return
	}
	extra := int64(le.Uint16(ino[inodeExtraIsize:]))
	has := func(off int) bool { return int64(off)+4 <= inodeGoodOldSize+extra && int64(off)+4 <= size }
	if has(inodeMtimeExtra) {
		mx := le.Uint32(ino[inodeMtimeExtra:])
		for _, off := range []int{inodeCtimeExtra, inodeAtimeExtra, inodeCrtimeExtra} {
			if has(off) {
				le.PutUint32(ino[off:], mx)
			}
		}
	}
	if has(inodeCrtime) {
		le.PutUint32(ino[inodeCrtime:], mtime)
	}
}
