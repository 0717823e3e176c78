package contract

import "regexp"

// TemplateNameRule says what a template's name may be.
const TemplateNameRule = "1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"

var templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidTemplateName reports whether name can name a template: checked
// where a template is made and where a gateway names one.
func ValidTemplateName(name string) bool { return templateName.MatchString(name) }
