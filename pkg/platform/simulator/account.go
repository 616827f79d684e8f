package simulator

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// More of the platform's codes, for the account endpoints.
const (
	codeInvalidButtonSize        = 40016
	codeInvalidButtonType        = 40017
	codeInvalidButtonNameSize    = 40018
	codeInvalidButtonKeySize     = 40019
	codeInvalidButtonURLSize     = 40020
	codeInvalidSubButtonSize     = 40023
	codeInvalidSubButtonNameSize = 40025
	codeMenuNotExist             = 46003
	// plainTokenOverlap is how long a token of GET /cgi-bin/token stays valid
	// after the next call replaced it: "公众平台后台会保证在5分钟内，新老
	// access_token都可用".
	plainTokenOverlap = 5 * time.Minute
)

// accountRoutes adds the account endpoints: the older token endpoint, the
// template list and the custom menu.
func (s *Simulator) accountRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/cgi-bin/token", s.handleToken)
	mux.HandleFunc("/cgi-bin/template/get_all_private_template", s.handleTemplates)
	mux.HandleFunc("/cgi-bin/menu/create", s.handleMenuCreate)
	mux.HandleFunc("/cgi-bin/menu/get", s.handleMenuGet)
}

// handleToken is GET /cgi-bin/token: every call makes a new token, and the
// one the previous call made stays valid five more minutes. Its tokens and
// the stable ones do not affect each other.
func (s *Simulator) handleToken(w http.ResponseWriter, r *http.Request) {
	s.stats.tokenRequests.Add(1)
	q := r.URL.Query()
	switch {
	case r.Method != http.MethodGet:
		s.answerError(w, codeRequireGET, "require GET method")
		return
	case q.Get("grant_type") != "client_credential":
		s.answerError(w, codeInvalidGrantType, "invalid grant_type")
		return
	case !s.checkAccount(w, q.Get("appid"), q.Get("secret")):
		return
	}
	now := s.now()
	tok := newToken()
	s.mu.Lock()
	if old := s.tokens[s.plainCurrent]; old != nil && old.exp.After(now.Add(plainTokenOverlap)) {
		old.exp = now.Add(plainTokenOverlap)
	}
	s.tokens[tok] = &tokenState{exp: now.Add(s.cfg.TokenTTL)}
	s.plainCurrent = tok
	s.mu.Unlock()
	b, _ := json.Marshal(struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}{tok, int64(s.cfg.TokenTTL / time.Second)})
	writeJSON(w, b)
}

// PrivateTemplate is one template of the account as template/get_all_private_template lists
// it.
type PrivateTemplate struct {
	TemplateID      string `json:"template_id"`
	Title           string `json:"title"`
	PrimaryIndustry string `json:"primary_industry"`
	DeputyIndustry  string `json:"deputy_industry"`
	Content         string `json:"content"`
	Example         string `json:"example"`
}

// handleTemplates is GET /cgi-bin/template/get_all_private_template: the
// account's templates, each keyword as {{name.DATA}} in the content.
func (s *Simulator) handleTemplates(w http.ResponseWriter, r *http.Request) {
	if code, msg := s.checkToken(r.URL.Query().Get("access_token"), s.now()); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	s.mu.Lock()
	list := make([]PrivateTemplate, 0, len(s.templates))
	for id, t := range s.templates {
		var content strings.Builder
		for i, k := range t.keywords {
			if i > 0 {
				content.WriteByte('\n')
			}
			content.WriteString(k + "：{{" + k + ".DATA}}")
		}
		list = append(list, PrivateTemplate{TemplateID: id, Title: id, PrimaryIndustry: "IT科技", DeputyIndustry: "互联网|电子商务",
			Content: content.String()})
	}
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b PrivateTemplate) int { return strings.Compare(a.TemplateID, b.TemplateID) })
	b, _ := json.Marshal(struct {
		TemplateList []PrivateTemplate `json:"template_list"`
	}{list})
	writeJSON(w, b)
}

// MenuButton is a button of the custom menu, as menu/create takes it.
type MenuButton struct {
	Type      string       `json:"type,omitempty"`
	Name      string       `json:"name"`
	Key       string       `json:"key,omitempty"`
	URL       string       `json:"url,omitempty"`
	AppID     string       `json:"appid,omitempty"`
	PagePath  string       `json:"pagepath,omitempty"`
	SubButton []MenuButton `json:"sub_button,omitempty"`
}

// Menu is the custom menu.
type Menu struct {
	Button []MenuButton `json:"button"`
}

// handleMenuCreate is POST /cgi-bin/menu/create with the platform's limits:
// 1 to 3 buttons of at most 16 bytes, each with at most 5 sub-buttons of at
// most 60 bytes; a view button's URL at most 1024 bytes, a click button's key
// at most 128.
func (s *Simulator) handleMenuCreate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.answerError(w, codeRequirePOST, "require POST method")
		return
	}
	if code, msg := s.checkToken(r.URL.Query().Get("access_token"), s.now()); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	var m Menu
	if code, msg := decodeBody(w, r, &m); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	if code, msg := checkMenu(m); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	b, _ := json.Marshal(m)
	s.mu.Lock()
	s.menu = b
	s.mu.Unlock()
	writeJSON(w, []byte(`{"errcode":0,"errmsg":"ok"}`))
}

func checkMenu(m Menu) (int, string) {
	if len(m.Button) < 1 || len(m.Button) > 3 {
		return codeInvalidButtonSize, "invalid button size"
	}
	for _, b := range m.Button {
		if b.Name == "" || len(b.Name) > 16 {
			return codeInvalidButtonNameSize, "invalid button name size"
		}
		if len(b.SubButton) > 5 {
			return codeInvalidSubButtonSize, "invalid sub button size"
		}
		if len(b.SubButton) > 0 {
			for _, sb := range b.SubButton {
				if sb.Name == "" || len(sb.Name) > 60 {
					return codeInvalidSubButtonNameSize, "invalid sub button name size"
				}
				if code, msg := checkAction(sb); code != 0 {
					return code, msg
				}
			}
			continue
		}
		if code, msg := checkAction(b); code != 0 {
			return code, msg
		}
	}
	return 0, ""
}

func checkAction(b MenuButton) (int, string) {
	switch b.Type {
	case "view":
		if len(b.URL) > 1024 || !isHTTPURL(b.URL) {
			return codeInvalidButtonURLSize, "invalid button url size"
		}
	case "click", "scancode_push", "scancode_waitmsg", "pic_sysphoto", "pic_photo_or_album", "pic_weixin", "location_select":
		if b.Key == "" || len(b.Key) > 128 {
			return codeInvalidButtonKeySize, "invalid button key size"
		}
	case "miniprogram":
		if b.AppID == "" || b.PagePath == "" || !isHTTPURL(b.URL) {
			return codeInvalidButtonType, "invalid button type"
		}
	default:
		return codeInvalidButtonType, "invalid button type"
	}
	return 0, ""
}

// handleMenuGet is GET /cgi-bin/menu/get: the menu menu/create set, or 46003.
func (s *Simulator) handleMenuGet(w http.ResponseWriter, r *http.Request) {
	if code, msg := s.checkToken(r.URL.Query().Get("access_token"), s.now()); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	s.mu.Lock()
	m := s.menu
	s.mu.Unlock()
	if m == nil {
		s.answerError(w, codeMenuNotExist, "menu no exist")
		return
	}
	b := make([]byte, 0, len(m)+16)
	b = append(b, `{"menu":`...)
	b = append(b, m...)
	b = append(b, '}')
	writeJSON(w, b)
}

// MenuJSON returns the custom menu as menu/create set it, nil if none.
func (s *Simulator) MenuJSON() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.menu...)
}
