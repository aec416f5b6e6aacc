package vt

// sgr applies SGR to the pen.
func (t *Terminal) sgr() {
	n := t.nParams()
	if n == 0 {
		t.pen = pen{}
		return
	}
	t.pen = applySGR(t.pen, t.params[:n], t.sub)
}

// applySGR returns p with the SGR parameters ps applied; bit i of sub marks ps[i] as a
// sub-parameter (it followed a ':').
func applySGR(p pen, ps []int32, sub uint32) pen {
	isSub := func(i int) bool { return i < len(ps) && sub&(1<<i) != 0 }
	for i := 0; i < len(ps); i++ {
		v := ps[i]
		switch {
		case v == 0:
			p = pen{}
		case v == 1:
			p.a |= attrBold
		case v == 2:
			p.a |= attrDim
		case v == 3:
			p.a |= attrItalic
		case v == 4:
			style := uint32(1)
			if isSub(i + 1) {
				i++
				style = uint32(ps[i])
				if style > 5 {
					style = 1
				}
			}
			p.a = p.a&^attrULMask | style<<attrULShift
		case v == 5 || v == 6:
			p.a |= attrBlink
		case v == 7:
			p.a |= attrInverse
		case v == 8:
			p.a |= attrInvisible
		case v == 9:
			p.a |= attrStrike
		case v == 21:
			p.a = p.a&^attrULMask | 2<<attrULShift
		case v == 22:
			p.a &^= attrBold | attrDim
		case v == 23:
			p.a &^= attrItalic
		case v == 24:
			p.a &^= attrULMask
		case v == 25:
			p.a &^= attrBlink
		case v == 27:
			p.a &^= attrInverse
		case v == 28:
			p.a &^= attrInvisible
		case v == 29:
			p.a &^= attrStrike
		case v >= 30 && v <= 37:
			p.fg = cmP16 | uint32(v-30)
		case v == 38 || v == 48 || v == 58:
			c, used, ok := extColor(ps, i, sub)
			i += used
			if ok {
				switch v {
				case 38:
					p.fg = c
				case 48:
					p.bg = c
				}
			}
		case v == 39:
			p.fg = 0
		case v >= 40 && v <= 47:
			p.bg = cmP16 | uint32(v-40)
		case v == 49:
			p.bg = 0
		case v == 53:
			p.a |= attrOverline
		case v == 55:
			p.a &^= attrOverline
		case v >= 90 && v <= 97:
			p.fg = cmP16 | uint32(v-90+8)
		case v >= 100 && v <= 107:
			p.bg = cmP16 | uint32(v-100+8)
		}
		// sub-parameters of anything else are skipped
		for isSub(i + 1) {
			i++
		}
	}
	return p
}

// extColor reads the colour of 38/48/58 at ps[i]: 5;n, 2;r;g;b, or their colon forms
// (5:n, 2:r:g:b, 2:cs:r:g:b). It returns how many parameters after ps[i] it used.
func extColor(ps []int32, i int, sub uint32) (c uint32, used int, ok bool) {
	if i+1 < len(ps) && sub&(1<<(i+1)) != 0 {
		// colon form: the sub-parameters that follow
		j := i + 1
		for j < len(ps) && sub&(1<<j) != 0 {
			j++
		}
		s := ps[i+1 : j]
		used = j - i - 1
		switch {
		case s[0] == 5 && len(s) >= 2:
			c, _, ok := palette(s[1])
			return c, used, ok
		case s[0] == 2 && len(s) >= 5:
			return rgb(s[2], s[3], s[4]), used, true
		case s[0] == 2 && len(s) == 4:
			return rgb(s[1], s[2], s[3]), used, true
		}
		return 0, used, false
	}
	if i+1 >= len(ps) {
		return 0, 0, false
	}
	switch ps[i+1] {
	case 5:
		if i+2 < len(ps) {
			c, _, ok := palette(ps[i+2])
			return c, 2, ok
		}
		return 0, 1, false
	case 2:
		if i+4 < len(ps) {
			return rgb(ps[i+2], ps[i+3], ps[i+4]), 4, true
		}
		return 0, len(ps) - i - 1, false
	}
	return 0, 1, false
}

func palette(n int32) (uint32, int, bool) {
	if n < 0 || n > 255 {
		return 0, 0, false
	}
	return cmP256 | uint32(n), 0, true
}

func rgb(r, g, b int32) uint32 {
	return cmRGB | uint32(r&0xff)<<16 | uint32(g&0xff)<<8 | uint32(b&0xff)
}
